// The CUDA kernels of ring attention's ops (ops/attention_pair.h), declared apart from the op table (cuda_ops.h) as
// the ops are, and the scratch their backward takes from the device, which the counting device takes alike for a
// planned GPU (in every build: the planner plans GPUs anywhere).
#pragma once

#include <cstdint>

#include "tandem/ops/attention_pair.h"

namespace tandem::ops::cuda {

// Only in builds with the CUDA backend.
void attention_pair_forward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                            const Tensor& y, const Tensor& lse);
void attention_merge(const Tensor& y_part, const Tensor& lse_part, const Tensor& y, const Tensor& lse);
void attention_pair_backward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                             const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dq, const Tensor& dkv);

// The most head dims the kernels take (each of a block's 128 threads holds up to 4 of a row's accumulators).
inline constexpr int64_t kPairMaxHeadDim = 512;

// Bytes of the backward's scratch: each query row's rowsum(dO * O), (B, H, Tq) f32. The forward takes none.
inline int64_t attention_pair_backward_scratch_bytes(int64_t b, int64_t heads, int64_t tq) {
  return b * heads * tq * 4;
}

}  // namespace tandem::ops::cuda
