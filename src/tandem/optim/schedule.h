// Learning-rate schedules with DeepSpeed's names, parameters and formulas (deepspeed/runtime/lr_schedules.py):
// constant, WarmupLR (warmup from warmup_min_lr to the peak, then constant), WarmupDecayLR (the same warmup,
// then linear decay back to warmup_min_lr at total_num_steps), WarmupCosineLR (warmup from warmup_min_ratio * peak,
// then cosine down to cos_min_ratio * peak). The warmup is "log" (DeepSpeed's default) or "linear". The schedule's
// parameters are the config's own struct (spec/train.h).
#pragma once

#include <cstdint>

#include "tandem/spec/train.h"

namespace tandem::optim {

// The rate for step `step` (0-based: the first update uses step 0), which is DeepSpeed's formula at
// last_batch_iteration = step.
double learning_rate(const spec::SchedulerConfig& cfg, int64_t step);

}  // namespace tandem::optim
