// Learning-rate schedules, DeepSpeed's names and parameters: constant, WarmupLR (linear warmup, then
// constant), WarmupCosineLR (linear warmup from warmup_min_ratio*lr, then cosine down to cos_min_ratio*lr).
#pragma once

#include <cstdint>
#include <string>

namespace tandem::optim {

struct ScheduleConfig {
  std::string type = "Constant";  // "Constant" | "WarmupLR" | "WarmupCosineLR"
  double lr = 1e-3;               // the peak rate (optimizer.params.lr)
  int64_t warmup_steps = 0;
  double warmup_min_lr = 0;     // WarmupLR: the rate at step 0
  int64_t total_steps = 1;      // WarmupCosineLR
  double warmup_min_ratio = 0;  // WarmupCosineLR: start of warmup as a fraction of lr
  double cos_min_ratio = 0.1;   // WarmupCosineLR: the floor as a fraction of lr
};

// The rate for step `step` (0-based: the first update uses step 0).
double learning_rate(const ScheduleConfig& cfg, int64_t step);

}  // namespace tandem::optim
