// The schedules' formulas, as DeepSpeed's lr_schedules.py computes them for a last_batch_iteration of `step`.
#include "tandem/optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace tandem::optim {
namespace {

using spec::SchedulerType;

// How far the warmup is at `step` (< warm), from 0 to 1.
double warmup_fraction(const spec::SchedulerConfig& c, int64_t step, int64_t warm) {
  if (c.warmup_type == spec::WarmupType::Log)
    return std::log(static_cast<double>(step + 1)) / std::log(static_cast<double>(warm));
  return static_cast<double>(step) / static_cast<double>(warm);
}

}  // namespace

double learning_rate(const spec::SchedulerConfig& c, int64_t step) {
  if (c.type == SchedulerType::Constant) return c.peak_lr;
  // DeepSpeed warms up over max(2, warmup_num_steps) steps (a log warmup over one step would divide by
  // log 1); no warmup at all when it is 0.
  const int64_t warm = c.warmup_num_steps > 0 ? std::max<int64_t>(2, c.warmup_num_steps) : 0;
  if (step < warm) {
    const double f = warmup_fraction(c, step, warm);
    if (c.type == SchedulerType::WarmupCosineLR)
      return c.peak_lr * (c.warmup_min_ratio + (1.0 - c.warmup_min_ratio) * f);
    return c.warmup_min_lr + (c.peak_lr - c.warmup_min_lr) * f;
  }
  if (c.type == SchedulerType::WarmupLR) return c.peak_lr;
  const double span = static_cast<double>(std::max<int64_t>(1, c.total_num_steps - warm));
  if (c.type == SchedulerType::WarmupDecayLR) {
    const double left = std::max(0.0, static_cast<double>(c.total_num_steps - step) / span);
    return c.warmup_min_lr + (c.peak_lr - c.warmup_min_lr) * left;
  }
  // DeepSpeed counts the cosine from 1 at the first step after the warmup, so it reaches its floor at
  // total_num_steps - 1, the last step of a run of total_num_steps.
  const double progress = std::min(1.0, static_cast<double>(step - warm + 1) / span);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return c.peak_lr * std::max(0.0, c.cos_min_ratio + (1.0 - c.cos_min_ratio) * cosine);
}

}  // namespace tandem::optim
