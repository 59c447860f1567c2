// Learning-rate schedules with DeepSpeed's names, parameters and formulas (deepspeed/runtime/lr_schedules.py):
// constant, WarmupLR (warmup from warmup_min_lr to the peak, then constant), WarmupDecayLR (the same warmup,
// then linear decay back to warmup_min_lr at total_steps), WarmupCosineLR (warmup from warmup_min_ratio * peak,
// then cosine down to cos_min_ratio * peak). The warmup is "log" (DeepSpeed's default) or "linear".
#pragma once

#include <cstdint>
#include <string>

namespace tandem::optim {

struct ScheduleConfig {
  std::string type = "Constant";    // "Constant" | "WarmupLR" | "WarmupDecayLR" | "WarmupCosineLR"
  double lr = 1e-3;                 // the peak rate (warmup_max_lr, else optimizer.params.lr)
  int64_t warmup_steps = 0;         // 0: no warmup; otherwise at least 2, as DeepSpeed clamps it
  std::string warmup_type = "log";  // "log": log(step + 1) / log(warmup_steps); "linear": step / warmup_steps
  double warmup_min_lr = 0;         // WarmupLR, WarmupDecayLR: the rate at step 0, and WarmupDecayLR's end
  int64_t total_steps = 1;          // WarmupDecayLR, WarmupCosineLR: where the decay ends
  double warmup_min_ratio = 0;      // WarmupCosineLR: start of warmup as a fraction of lr
  double cos_min_ratio = 1e-4;      // WarmupCosineLR: the floor as a fraction of lr
};

// The rate for step `step` (0-based: the first update uses step 0), which is DeepSpeed's formula at
// last_batch_iteration = step.
double learning_rate(const ScheduleConfig& cfg, int64_t step);

}  // namespace tandem::optim
