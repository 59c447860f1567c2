// Helpers shared by the op front end (ops.cc) and its backends: reading a tensor as a 2-D matrix.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"

namespace tandem::ops {

// Ops read a tensor of any rank >= 1 as (rows, last dim). The product of the leading dims, rather than
// numel / last dim, keeps the row count right when the last dim is 0.
inline int64_t rows_of(const Tensor& t) {
  int64_t n = 1;
  for (int i = 0; i + 1 < t.rank(); ++i) n *= t.shape()[i];
  return n;
}
inline int64_t cols_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.shape().back(); }

// Elementwise loops split across threads only above this many elements: below it the fork costs more.
inline constexpr int64_t kParallelMinElements = int64_t{1} << 15;

}  // namespace tandem::ops
