// The plain attention kernels (attention.cu): simple, exact fp32-math causal attention for any float dtype. They run
// f32 attention (cuDNN's fused SDPA has no f32 path) and bf16/f16 shapes cuDNN cannot take; they are correct, not
// fast (one block per query or key row, scores in shared memory). Same contract as cuda::attention_forward/backward.
#pragma once

#include "tandem/core/tensor.h"

namespace tandem::ops::cuda {

void attention_forward_plain(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse);
void attention_backward_plain(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, const Tensor& dy,
                              const Tensor& dqkv);

}  // namespace tandem::ops::cuda
