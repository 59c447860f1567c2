// Global-norm gradient clipping: the norm is computed over all gradients (the caller sums the squares of
// every shard it does not hold), and the update reads grad * coefficient.
#pragma once

#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::optim {

// Sum of squares over the tensors, in double, the tensors' sums added in order (one wait for the device).
double sum_of_squares(const std::vector<Tensor>& grads);
// min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (clipping off).
float clip_coefficient(double global_norm, double max_norm);

}  // namespace tandem::optim
