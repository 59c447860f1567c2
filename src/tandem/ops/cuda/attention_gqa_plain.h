// The plain grouped-query attention kernels (attention_gqa.cu): simple, exact fp32-math causal attention with H query
// heads and Hkv key/value heads for any float dtype. They run f32 (cuDNN's fused SDPA has no f32 path) and the
// bf16/f16 shapes or alignments cuDNN refuses; correct, not fast. Same contract as cuda::attention_gqa_forward and
// attention_gqa_backward (ops.h).
#pragma once

#include "tandem/core/tensor.h"

namespace tandem::ops::cuda {

void attention_gqa_forward_plain(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse);
void attention_gqa_backward_plain(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                                  const Tensor& dy, const Tensor& dqkv);

}  // namespace tandem::ops::cuda
