#include "tandem/optim/clip.h"

#include <algorithm>

#include "tandem/ops/ops.h"

namespace tandem::optim {

double sum_of_squares(const std::vector<Tensor>& grads) { return ops::sum_squares_total(grads); }

float clip_coefficient(double global_norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (global_norm + 1e-6)));
}

}  // namespace tandem::optim
