// Scratch sizes of the RMSNorm and grouped-query attention kernels (rmsnorm.cu, attention_gqa.cu), shared by the
// kernels and by scratch.cc (which every build compiles, so the planner can plan GPUs without the CUDA toolkit).
// Plain C++: no CUDA header.
#pragma once

#include <cstdint>

namespace tandem::ops::cuda {

// rmsnorm_backward's dgamma: pass 1 sums slices of this many rows per column into (slices, C) f32 partials, pass 2
// adds the slices in order.
inline constexpr int64_t kRmsnormRowsPerSlice = 64;
inline int64_t rmsnorm_slices(int64_t rows) { return (rows + kRmsnormRowsPerSlice - 1) / kRmsnormRowsPerSlice; }
inline int64_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t cols) {
  return rows == 0 || cols == 0 ? 0 : rmsnorm_slices(rows) * cols * 4;
}

// attention_gqa_backward's plain kernels: rowsum(dO * O) (B, H, T) f32.
inline int64_t attention_gqa_backward_scratch_bytes(int64_t batch, int64_t heads, int64_t t) {
  return batch * heads * t * 4;
}

}  // namespace tandem::ops::cuda
