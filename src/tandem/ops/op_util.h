// Helpers shared by the op front end (ops.cc) and its backends: reading a tensor as a 2-D matrix, and when a
// CPU loop is worth splitting across threads.
#pragma once

#include <cstdint>
#include <vector>

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

// CPU loops split across OpenMP threads only when their work pays for the fork and join. Work is counted in
// element operations of about one load, add and store (~0.4 ns on one core). A join costs about a microsecond
// on idle cores, but on cores shared with other processes it waits for a descheduled thread: measured on a
// busy 2-core host, 0.1-0.3 ms per parallel region on average. Loops below ~0.1 ms of one core stay serial.
inline constexpr int64_t kParallelMinWork = int64_t{1} << 18;
// Element operations per element of loops that do more than one (measured, one core, fp32).
inline constexpr int64_t kRowPassCost = 4;          // layernorm: several passes over each row, double sums
inline constexpr int64_t kTranscendentalCost = 16;  // an exp or tanh per element, ~4-16 ns

// Whether `elements` items of `cost` element operations each are worth a parallel loop.
inline bool worth_parallel(int64_t elements, int64_t cost = 1) { return elements * cost >= kParallelMinWork; }

// The grouped products' walk (grouped_matmul, grouped_weight_grad): fn(matrix, first_row, rows) for each group g with
// rows[g] > 0, matrix the g-th (N, K) of the stacked (G, N, K) `stack`, first_row where its rows begin.
template <class Fn>
void for_each_group(const Tensor& stack, const std::vector<int64_t>& rows, Fn&& fn) {
  const int64_t per = stack.dim(1) * stack.dim(2);
  int64_t first = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    if (rows[g] > 0)
      fn(stack.flat_slice(static_cast<int64_t>(g) * per, per, {stack.dim(1), stack.dim(2)}), first, rows[g]);
    first += rows[g];
  }
}

}  // namespace tandem::ops
