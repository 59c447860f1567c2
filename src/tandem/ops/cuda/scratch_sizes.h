// Scratch sizes of the RMSNorm and grouped-query attention kernels (rmsnorm.cu, attention_gqa.cu), shared by the
// kernels and by scratch.cc (which every build compiles, so the planner can plan GPUs without the CUDA toolkit).
// Plain C++: no CUDA header.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"
#include "tandem/ops/cuda/workspace.h"

namespace tandem::ops::cuda {

// rmsnorm_backward's dgamma, general kernels: pass 1 sums slices of this many rows per column into (slices, C) f32
// partials, pass 2 adds the slices in order.
inline constexpr int64_t kRmsnormRowsPerSlice = 64;
inline int64_t rmsnorm_slices(int64_t rows) { return (rows + kRmsnormRowsPerSlice - 1) / kRmsnormRowsPerSlice; }
inline int64_t rmsnorm_backward_general_scratch_bytes(int64_t rows, int64_t cols) {
  return rows == 0 || cols == 0 ? 0 : rmsnorm_slices(rows) * cols * 4;
}
// The one-pass packed kernel (C a whole number of 16-byte packs, at most 1024 a row, tensors aligned) shares
// LayerNorm's row split (workspace.h) and writes (blocks, C) f32 dgamma partials, one row a block.
inline int64_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t cols, int64_t elem_bytes) {
  if (rows == 0 || cols == 0) return 0;
  const int p = layernorm_backward_packs_per_thread(cols, elem_bytes);
  if (p == 0) return rmsnorm_backward_general_scratch_bytes(rows, cols);
  const int64_t per = layernorm_backward_rows_per_block(rows, p);
  return (rows + per - 1) / per * cols * 4;
}

// attention_gqa_backward's plain kernels: rowsum(dO * O) (B, H, T) f32.
inline int64_t attention_gqa_backward_scratch_bytes(int64_t batch, int64_t heads, int64_t t) {
  return batch * heads * t * 4;
}

// cuDNN's workspace for the fused attention graph of this shape (forward or backward), asked of cuDNN on `device`
// when it is a CUDA device (attention_gqa.cc: the graph is built and cached there, and the run reuses it); 0 for
// any other device, and where the plain kernels run.
int64_t attention_gqa_cudnn_workspace_bytes(Device* device, const Tensor& qkv, int heads, int kv_heads, bool backward);

}  // namespace tandem::ops::cuda
