// The op set as one list: every op a backend implements, with the signature ops.cc calls it by once shapes and
// dtypes are checked (ops.h states each op's contract). TANDEM_OPS(X) expands X(return type, name, parameters,
// arguments) once per op; from it come each backend's declarations (cpu_ops.h, cuda_ops.h), the table of function
// pointers a backend fills (backend.h), the op ids the counting device records, and the counting backend itself.
// A new op is one line here, its contract and checks in ops.h / ops.cc, and a kernel in each backend.
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/core/ignore_target.h"
#include "tandem/core/random_fill.h"
#include "tandem/core/tensor.h"
#include "tandem/ops/fp8_scale.h"

namespace tandem::ops {

struct AdamWParams;

// The embedding and cross-entropy ops take the vocabulary-sharded form: this slot owns ids/columns
// [start, start + V_local) of `vocab`; the unsharded ops pass start 0 and vocab V_local. Ids outside [0, vocab)
// throw; kUncheckedVocab skips the upper bound where the caller has no vocab (sharded backward: forward checked it).
inline constexpr int64_t kUncheckedVocab = int64_t{1} << 31;
// The cross-entropy ops' target of a row that does not count (a masked position): no loss, no gradient
// (core/ignore_target.h).
using tandem::kIgnoreTarget;

}  // namespace tandem::ops

// clang-format off
#define TANDEM_OPS(X)                                                                                              \
  X(void, matmul, (const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float beta),      \
    (a, b, c, trans_a, trans_b, beta))                                                                             \
  X(void, add_bias, (const Tensor& y, const Tensor& bias), (y, bias))                                              \
  X(void, bias_backward, (const Tensor& dy, const Tensor& dbias), (dy, dbias))                                     \
  X(void, add, (const Tensor& a, const Tensor& b, const Tensor& out), (a, b, out))                                 \
  X(void, axpy, (float alpha, const Tensor& x, const Tensor& y), (alpha, x, y))                                    \
  X(void, scale, (const Tensor& x, float alpha), (x, alpha))                                                       \
  X(void, fill, (const Tensor& x, float value), (x, value))                                                        \
  X(void, random_fill, (const Tensor& out, const RandomFill& fill), (out, fill))                                    \
  X(void, cast, (const Tensor& src, const Tensor& dst), (src, dst))                                                \
  X(void, copy_columns, (const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col, int64_t width),   \
    (src, src_col, dst, dst_col, width))                                                                           \
  X(void, relu_forward, (const Tensor& x, const Tensor& y), (x, y))                                                \
  X(void, relu_backward, (const Tensor& x, const Tensor& dy, const Tensor& dx), (x, dy, dx))                       \
  X(void, gelu_forward, (const Tensor& x, const Tensor& y), (x, y))                                                \
  X(void, sigmoid_forward, (const Tensor& x, const Tensor& y), (x, y))                                             \
  X(void, sigmoid_backward, (const Tensor& y, const Tensor& dy, const Tensor& dx), (y, dy, dx))                    \
  X(void, gelu_backward, (const Tensor& x, const Tensor& dy, const Tensor& dx), (x, dy, dx))                       \
  X(void, bias_gelu_forward, (const Tensor& x, const Tensor& bias, const Tensor& y), (x, bias, y))                 \
  X(void, bias_gelu_backward, (const Tensor& x, const Tensor& bias, const Tensor& dy, const Tensor& dx),           \
    (x, bias, dy, dx))                                                                                             \
  X(void, layernorm_forward, (const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,           \
                              const Tensor& mean, const Tensor& rstd, float eps),                                  \
    (x, gamma, beta, y, mean, rstd, eps))                                                                          \
  X(void, layernorm_backward, (const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,         \
                               const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta),    \
    (dy, x, gamma, mean, rstd, dx, dgamma, dbeta))                                                                 \
  X(void, embedding_forward, (const Tensor& ids, const Tensor& table, const Tensor& y, int64_t start,              \
                              int64_t vocab),                                                                      \
    (ids, table, y, start, vocab))                                                                                 \
  X(void, embedding_backward, (const Tensor& ids, const Tensor& dy, const Tensor& dtable, int64_t start,           \
                               int64_t vocab),                                                                     \
    (ids, dy, dtable, start, vocab))                                                                               \
  X(void, add_positions, (const Tensor& y, const Tensor& pos), (y, pos))                                           \
  X(void, add_positions_backward, (const Tensor& dy, const Tensor& dpos), (dy, dpos))                              \
  X(void, cross_entropy_forward, (const Tensor& logits, const Tensor& targets, const Tensor& losses,               \
                                  const Tensor& lse),                                                              \
    (logits, targets, losses, lse))                                                                                \
  X(void, cross_entropy_stats, (const Tensor& logits, const Tensor& targets, int64_t start, int64_t vocab,         \
                                const Tensor& row_max, const Tensor& target_logit),                                \
    (logits, targets, start, vocab, row_max, target_logit))                                                        \
  X(void, row_sum_exp, (const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp),                       \
    (logits, row_max, sum_exp))                                                                                    \
  X(void, cross_entropy_backward, (const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale,    \
                                   const Tensor& dlogits, int64_t start, int64_t vocab),                           \
    (logits, targets, lse, scale, dlogits, start, vocab))                                                          \
  X(void, cross_entropy_finish, (const Tensor& row_max, const Tensor& target_logit, const Tensor& lse,             \
                                 const Tensor& targets, const Tensor& loss_sum),                                   \
    (row_max, target_logit, lse, targets, loss_sum))                                                                        \
  X(double, sum_squares, (const Tensor& x), (x))                                                                   \
  X(double, sum_squares_total, (const std::vector<Tensor>& xs), (xs))                                              \
  X(void, adamw_step, (const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,                  \
                       const AdamWParams& p, const Tensor& rounded),                                               \
    (param, grad, m, v, p, rounded))                                                                               \
  X(void, layernorm_backward_add, (const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,     \
                                   const Tensor& rstd, const Tensor& dres, const Tensor& dx, const Tensor& dgamma, \
                                   const Tensor& dbeta),                                                           \
    (dy, x, gamma, mean, rstd, dres, dx, dgamma, dbeta))                                                           \
  X(void, linear_forward, (const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,       \
                           const Tensor& y),                                                                       \
    (x, weight, bias, residual, y))                                                                                \
  X(void, linear_weight_grad, (const Tensor& dy, const Tensor& x, const Tensor& dweight, const Tensor& dbias),     \
    (dy, x, dweight, dbias))                                                                                       \
  X(void, rmsnorm_forward, (const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd, float eps),  \
    (x, gamma, y, rstd, eps))                                                                                      \
  X(void, rmsnorm_backward, (const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,          \
                             const Tensor& dx, const Tensor& dgamma),                                              \
    (dy, x, gamma, rstd, dx, dgamma))                                                                              \
  X(void, rmsnorm_backward_add, (const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,      \
                                 const Tensor& dres, const Tensor& dx, const Tensor& dgamma),                      \
    (dy, x, gamma, rstd, dres, dx, dgamma))                                                                        \
  X(void, rotary_forward, (const Tensor& x, const Tensor& cos, const Tensor& sin, int heads, const Tensor& y),     \
    (x, cos, sin, heads, y))                                                                                       \
  X(void, rotary_backward, (const Tensor& dy, const Tensor& cos, const Tensor& sin, int heads, const Tensor& dx),  \
    (dy, cos, sin, heads, dx))                                                                                     \
  X(void, head_norm_forward, (const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, int heads, int kv_heads, \
                              const Tensor& y, const Tensor& rstd, float eps, const Tensor& sums, int64_t width),  \
    (x, q_gain, k_gain, heads, kv_heads, y, rstd, eps, sums, width))                                               \
  X(void, head_norm_backward, (const Tensor& dy, const Tensor& x, const Tensor& q_gain, const Tensor& k_gain,       \
                               int heads, int kv_heads, const Tensor& rstd, const Tensor& dx, const Tensor& dq_gain, \
                               const Tensor& dk_gain, const Tensor& sums, int64_t width),                          \
    (dy, x, q_gain, k_gain, heads, kv_heads, rstd, dx, dq_gain, dk_gain, sums, width))                             \
  X(void, head_norm_sums, (const Tensor& a, const Tensor& b, const Tensor& q_gain, const Tensor& k_gain, int heads, \
                           int kv_heads, int64_t d, const Tensor& sums),                                           \
    (a, b, q_gain, k_gain, heads, kv_heads, d, sums))                                                              \
  X(void, swiglu_forward, (const Tensor& gate_up, const Tensor& y), (gate_up, y))                                  \
  X(void, swiglu_backward, (const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up),                      \
    (gate_up, dy, dgate_up))                                                                                       \
  X(void, attention_gqa_forward, (const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse, \
                                  int64_t block_bytes),                                                            \
    (qkv, heads, kv_heads, y, lse, block_bytes))                                                                   \
  X(void, attention_gqa_backward, (const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse, \
                                   const Tensor& dy, const Tensor& dqkv, int64_t block_bytes),                     \
    (qkv, heads, kv_heads, y, lse, dy, dqkv, block_bytes))                                                         \
  X(void, attention_gqa_documents_forward, (const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,   \
                                            const Tensor& y, const Tensor& lse),                                   \
    (qkv, heads, kv_heads, documents, y, lse))                                                                     \
  X(void, attention_gqa_documents_backward, (const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,  \
                                             const Tensor& y, const Tensor& lse, const Tensor& dy,                 \
                                             const Tensor& dqkv),                                                  \
    (qkv, heads, kv_heads, documents, y, lse, dy, dqkv))                                                           \
  X(void, dropout, (const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t stream, int64_t row0,      \
                    int64_t width, int64_t col0),                                                                  \
    (x, y, p, seed, stream, row0, width, col0))                                                                    \
  X(void, amax, (const Tensor& x, const Tensor& amax, Fp8Blocks blocks, bool transposed),                         \
    (x, amax, blocks, transposed))                                                                                 \
  X(void, fp8_quantize, (const Tensor& x, const Tensor& amax, const Tensor& q, const Tensor& q_t,                  \
                         const Tensor& inv_scale, Fp8Blocks blocks),                                               \
    (x, amax, q, q_t, inv_scale, blocks))                                                                          \
  X(void, fp8_matmul, (const Tensor& a, const Tensor& a_inv_scale, const Tensor& b, const Tensor& b_inv_scale,     \
                       const Tensor& bias, const Tensor& c, const Tensor& d, bool fast_accum, Fp8Blocks a_blocks,  \
                       Fp8Blocks b_blocks),                                                                        \
    (a, a_inv_scale, b, b_inv_scale, bias, c, d, fast_accum, a_blocks, b_blocks))                                  \
  X(void, moe_route, (const Tensor& logits, int k, bool normalize, const Tensor& probs, const Tensor& idx,          \
                      const Tensor& weights),                                                                      \
    (logits, k, normalize, probs, idx, weights))                                                                   \
  X(void, moe_route_backward, (const Tensor& probs, const Tensor& idx, const Tensor& dweights, bool normalize,     \
                               const Tensor& aux, const Tensor& dlogits),                                          \
    (probs, idx, dweights, normalize, aux, dlogits))                                                               \
  X(void, moe_route_stats, (const Tensor& probs, const Tensor& idx, const Tensor& counts, const Tensor& probsum),  \
    (probs, idx, counts, probsum))                                                                                 \
  X(void, moe_aux_loss, (const Tensor& counts, const Tensor& probsum, float scale, const Tensor& sum),            \
    (counts, probsum, scale, sum))                                                                                 \
  X(void, moe_order, (const Tensor& idx, int experts, const Tensor& pos, const Tensor& offsets),                   \
    (idx, experts, pos, offsets))                                                                                  \
  X(std::vector<int64_t>, moe_expert_rows, (const Tensor& offsets, int64_t rows), (offsets, rows))                \
  X(void, moe_gather, (const Tensor& x, const Tensor& pos, const Tensor& xg), (x, pos, xg))                       \
  X(void, grouped_matmul, (const Tensor& a, const Tensor& b, const Tensor& c, const std::vector<int64_t>& rows,     \
                           bool trans_b, float beta),                                                              \
    (a, b, c, rows, trans_b, beta))                                                                                \
  X(void, grouped_weight_grad, (const Tensor& dy, const Tensor& x, const Tensor& dw,                               \
                                const std::vector<int64_t>& rows),                                                 \
    (dy, x, dw, rows))                                                                                             \
  X(void, moe_combine, (const Tensor& yg, const Tensor& pos, const Tensor& weights, const Tensor& y),              \
    (yg, pos, weights, y))                                                                                         \
  X(void, moe_combine_backward, (const Tensor& dy, const Tensor& yg, const Tensor& pos, const Tensor& weights,     \
                                 const Tensor& dyg, const Tensor& dweights),                                       \
    (dy, yg, pos, weights, dyg, dweights))
// clang-format on
