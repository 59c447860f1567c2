#include "tandem/optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"

namespace tandem::optim {

double learning_rate(const ScheduleConfig& c, int64_t step) {
  if (c.type == "Constant") return c.lr;
  // Warmup reaches the peak at step == warmup_steps.
  const double warm = c.warmup_steps > 0 ? std::min(1.0, static_cast<double>(step) / c.warmup_steps) : 1.0;
  if (c.type == "WarmupLR") return c.warmup_min_lr + (c.lr - c.warmup_min_lr) * warm;
  if (c.type == "WarmupCosineLR") {
    if (step < c.warmup_steps) return c.lr * (c.warmup_min_ratio + (1.0 - c.warmup_min_ratio) * warm);
    const double span = std::max<int64_t>(1, c.total_steps - c.warmup_steps);
    const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
    const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
    return c.lr * (c.cos_min_ratio + (1.0 - c.cos_min_ratio) * cosine);
  }
  TANDEM_FAIL("unknown scheduler type '", c.type, "': use Constant, WarmupLR or WarmupCosineLR");
}

}  // namespace tandem::optim
