// The CUDA backend of the op set: the contracts of tandem/ops/ops.h on tensors of a CudaDevice, with shapes already
// checked by ops.cc (names and signatures match ops/cpu/cpu_ops.h, plus fill and cross_entropy_finish).
// Dtypes follow the mixed-precision rules of ops.h: X is f32, bf16 or f16; math is fp32 inside every kernel.
// Everything is queued on the device's compute stream; nothing waits for the GPU except sum_squares.
// Bad ids or targets (out of range) cannot throw from a kernel: they are reported through the device's deferred-error
// slot and thrown by the next CudaDevice::synchronize(), copy_to_host() or sum_squares(); the kernel writes zeros
// (embedding), skips the row (embedding backward) or writes NaN (cross-entropy losses) for them meanwhile.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"

namespace tandem::ops::cuda {

void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float beta);

void add_bias(const Tensor& y, const Tensor& bias);
void bias_backward(const Tensor& dy, const Tensor& dbias);
void add(const Tensor& a, const Tensor& b, const Tensor& out);
void axpy(float alpha, const Tensor& x, const Tensor& y);
void scale(const Tensor& x, float alpha);
void relu_forward(const Tensor& x, const Tensor& y);
void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);
void gelu_forward(const Tensor& x, const Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);
void cast(const Tensor& src, const Tensor& dst);
void fill(const Tensor& x, float value);

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, const Tensor& mean,
                       const Tensor& rstd, float eps);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta);

// As in cpu_ops.h: this slot owns ids/columns [start, start + V_local) of `vocab`; kUncheckedVocab skips the upper
// bound (the sharded backward, whose forward checked it).
inline constexpr int64_t kUncheckedVocab = int64_t{1} << 31;
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& y, int64_t start, int64_t vocab);
void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dtable, int64_t start, int64_t vocab);
void add_positions(const Tensor& y, const Tensor& pos);
void add_positions_backward(const Tensor& dy, const Tensor& dpos);

void attention_forward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse);
void attention_backward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, const Tensor& dy,
                        const Tensor& dqkv);

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse);
void cross_entropy_stats(const Tensor& logits, const Tensor& targets, int64_t start, int64_t vocab,
                         const Tensor& row_max, const Tensor& target_logit);
void row_sum_exp(const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale,
                            const Tensor& dlogits, int64_t start, int64_t vocab);
void cross_entropy_finish(const Tensor& row_max, const Tensor& target_logit, const Tensor& lse, const Tensor& loss_sum);

// Waits for the device (the one op that does) and raises any deferred kernel error.
double sum_squares(const Tensor& x);

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p);

}  // namespace tandem::ops::cuda
