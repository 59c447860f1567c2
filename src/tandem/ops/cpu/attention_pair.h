// The CPU kernels of ring attention's ops (ops/attention_pair.h), and the scratch each takes from its device, which the
// counting device takes alike.
#pragma once

#include <cstdint>

#include "tandem/ops/attention_pair.h"

namespace tandem::ops::cpu {

void attention_pair_forward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                            const Tensor& y, const Tensor& lse);
void attention_merge(const Tensor& y_part, const Tensor& lse_part, const Tensor& y, const Tensor& lse);
void attention_pair_backward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                             const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dq, const Tensor& dkv);

// Bytes of f32 scratch the kernels above allocate on q's device with `threads` OpenMP threads.
int64_t attention_pair_forward_scratch(int threads, const Tensor& q, const Tensor& kv, int heads, int kv_heads);
int64_t attention_pair_backward_scratch(int threads, const Tensor& q, const Tensor& kv, int heads, int kv_heads);

}  // namespace tandem::ops::cpu
