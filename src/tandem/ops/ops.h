// The op set: forward and backward of every computation the models need.
// Each op checks shapes and dtypes and dispatches on the tensors' device (CPU: OpenBLAS and OpenMP, in
// ops/cpu; CUDA: cuBLASLt, cuDNN and our kernels, in ops/cuda). Ops never allocate their outputs unless they
// say so; scratch goes through the device allocator. Ops never wait for the device (no host syncs) except
// the three that return a host value (sum_squares and sum_squares_total, once per call, and moe_expert_rows).
// Gradient outputs named d* are overwritten unless the comment says "accumulates" (+=).
// Legend: N rows (tokens), K/M/C channels, V vocabulary, B batch, T time, H heads, D head dim (C = H*D).
// Also: Hkv key/value heads (grouped-query attention), F the MLP's hidden width, W a row's width.
//
// Dtypes (mixed precision). Activations, their gradients and the parameters the layers read are in one
// compute dtype X: f32, bf16 or f16. Every op computes in fp32 and rounds once when it stores. Unless a
// comment says otherwise, all float tensors of one op share the dtype X. The places that are fp32 always:
//   - matmul: a and b share X; c is X or f32 (weight gradients accumulate into fp32 buffers).
//   - bias_backward: dbias f32. layernorm: mean, rstd, dgamma, dbeta f32. embedding_backward: dtable f32.
//     add_positions_backward: dpos f32. attention: lse f32.
//   - linear_weight_grad: dweight X or f32 (as matmul's c), dbias f32.
//   - cross entropy: logits and dlogits in X; row_max, target_logit, sum_exp, lse, losses, loss_sum f32.
//   - adamw_step: every tensor f32 (master weights, fp32 gradients, moments).
//   - sum_squares, sum_squares_total: any float dtype. cast: any float dtype to any float dtype.
//   - axpy, add, scale, fill: one dtype.
//   - rmsnorm: rstd, dgamma f32. head_norm: rstd, dq_gain, dk_gain f32. rotary: cos, sin f32. attention_gqa: lse f32.
//   - moe: the router's logits, probabilities, weights and their gradients, and the balance sums f32; expert choices,
//     rows and offsets i32; only the token rows (x, xg, y, yg and their gradients) are in X.
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/core/random_fill.h"
#include "tandem/core/tensor.h"
#include "tandem/ops/fp8_scale.h"

namespace tandem::ops {

// c = op(a) @ op(b) + beta * c, over the last two dims of 2-D views: a is (M, K) or, with trans_a,
// (K, M); b is (K, N) or, with trans_b, (N, K); c is (M, N). Inputs of rank > 2 are read as
// (numel / last dim, last dim). beta = 1 accumulates.
void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float beta = 0.0f);

// y (N, C) += bias (C), broadcast over rows.
void add_bias(const Tensor& y, const Tensor& bias);
// dbias (C) += sum over rows of dy (N, C). Accumulates.
void bias_backward(const Tensor& dy, const Tensor& dbias);

// A linear layer's forward as one op: y (N, out) = x (N, in) @ weight (out, in)^T + bias (out) + residual (N, out),
// bias broadcast over rows. bias and residual are optional (an undefined Tensor leaves the term out). y holds what
// matmul, add_bias and add give, in that order, each rounding to X: on the CPU exactly those ops; on CUDA one
// cuBLASLt product whose epilogue adds the bias and the residual before rounding once. y shares memory with no input.
void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual, const Tensor& y);
// A linear layer's parameter gradients as one op: dweight (out, in) += dy (N, out)^T @ x (N, in), and, when dbias is
// defined, dbias (out) += sum over rows of dy. Both accumulate: what matmul with beta 1 and bias_backward give (on
// CUDA the bias gradient comes out of the same cuBLASLt product, its BGRADB epilogue). dweight shares no memory with
// dy or x.
void linear_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dweight, const Tensor& dbias);

// out = a + b, elementwise, same shape. out may alias a or b.
void add(const Tensor& a, const Tensor& b, const Tensor& out);
// y += alpha * x, elementwise. Accumulates.
void axpy(float alpha, const Tensor& x, const Tensor& y);
// x *= alpha.
void scale(const Tensor& x, float alpha);

// ReLU: y = max(x, 0); dx = dy * (x > 0).
void relu_forward(const Tensor& x, const Tensor& y);
void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);
// y = 1 / (1 + exp(-x)), elementwise (Qwen2-MoE's shared-expert gate); in place allowed.
void sigmoid_forward(const Tensor& x, const Tensor& y);
// dx = dy y (1 - y), from the forward's output y; in place allowed.
void sigmoid_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);

// GELU, tanh approximation (as PyTorch's approximate="tanh"):
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(const Tensor& x, const Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);
// GELU of a biased input in one pass: y (N, C) = gelu(x + bias), x (N, C), bias (C) broadcast over rows. The sum is
// rounded to X before the GELU, so y is exactly what add_bias then gelu_forward give, for one read of x instead of
// two reads and a write. dx (N, C) = dy * gelu'(x + bias), with the same rounded sum.
void bias_gelu_forward(const Tensor& x, const Tensor& bias, const Tensor& y);
void bias_gelu_backward(const Tensor& x, const Tensor& bias, const Tensor& dy, const Tensor& dx);

// LayerNorm over the last dim: x (N, C), gamma/beta (C), y (N, C); saves mean (N) and rstd (N)
// (rstd = 1 / sqrt(var + eps), biased variance as PyTorch).
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, const Tensor& mean,
                       const Tensor& rstd, float eps = 1e-5f);
// dx (N, C) overwritten; dgamma, dbeta (C) accumulate.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta);
// The same with a residual gradient added: dx = (layernorm_backward's dx) + dres, dres (N, C) in X; dgamma and dbeta
// accumulate as there. The input gradient of a pre-LayerNorm residual block (the LayerNorm branch's plus the skip's)
// in one pass: on the CPU exactly layernorm_backward then add(dx, dres, dx); on CUDA the sum is formed in fp32 and
// rounded once. dx may share memory with dy, not with dres.
void layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                            const Tensor& rstd, const Tensor& dres, const Tensor& dx, const Tensor& dgamma,
                            const Tensor& dbeta);

// Embedding lookup: ids (N) i32 in [0, V), table (V, C), y (N, C). An id out of range throws Error.
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& y);
// dtable (V, C) += scatter of dy (N, C) by ids. Accumulates; deterministic (no atomics).
void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dtable);
// Vocabulary-sharded (tensor-parallel) variants: this slot's table (V_local, C) holds rows [start, start + V_local)
// of the full (vocab, C) table. Forward writes table[id - start] for ids in that range and zeros for the others
// (the slots' outputs are summed afterwards); ids outside [0, vocab) throw Error. Backward scatters only the ids
// in range (negative ids throw; the upper bound was checked by forward).
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& y, int64_t start, int64_t vocab);
void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dtable, int64_t start);

// Learned positions: y (B, T, C) += pos (T_max, C) rows 0..T-1, for every batch row.
void add_positions(const Tensor& y, const Tensor& pos);
// dpos (T_max, C) rows 0..T-1 += sum over batch of dy (B, T, C). Accumulates.
void add_positions_backward(const Tensor& dy, const Tensor& dpos);

// Causal multi-head self-attention on a fused projection: qkv (B, T, 3C) laid out as [q | k | v] along the
// last dim, head h using columns h*D .. h*D+D-1 of each part (PyTorch's split then view(B, T, H, D)).
// y (B, T, C) = softmax(q k^T / sqrt(D) + causal mask) v, heads concatenated. Saves lse (B, H, T), the
// log-sum-exp of each score row, so backward recomputes the probabilities instead of storing (T, T). `block_bytes`:
// as attention_gqa_forward's.
void attention_forward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, int64_t block_bytes = 0);
// dqkv (B, T, 3C) overwritten.
void attention_backward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, const Tensor& dy,
                        const Tensor& dqkv, int64_t block_bytes = 0);

// Softmax cross-entropy: logits (N, V), targets (N) i32 in [0, V), or kIgnoreTarget (op_list.h: -100) for a row that
// does not count: its loss is 0 and its logits' gradient 0, in every op below. losses (N) gets each row's
// -log softmax(logits)[target]; lse (N) saves each row's log-sum-exp. A target out of range throws Error.
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse);
// dlogits (N, V) = scale * (softmax(logits) - onehot(target)); scale is d(loss)/d(row loss), e.g. 1/N
// for the mean. dlogits may alias logits (the logits are then overwritten).
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale,
                            const Tensor& dlogits);
// Vocabulary-sharded (tensor-parallel) cross-entropy: this slot's logits (N, V_local) are columns
// [start, start + V_local) of the full (N, vocab). The caller joins the slots: row_max (N) = max of the row's local
// logits, then max over slots; target_logit (N) = the target's logit if it falls in this slot, else 0, then summed;
// row_sum_exp gives sum_exp (N) = sum_j exp(logits[i, j] - row_max[i]), summed over slots, and
// lse = row_max + log(sum_exp). Targets outside [0, vocab) throw Error.
void cross_entropy_stats(const Tensor& logits, const Tensor& targets, int64_t start, int64_t vocab,
                         const Tensor& row_max, const Tensor& target_logit);
void row_sum_exp(const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp);
// As above with the full lse (N): the one-hot is subtracted only where the target falls in this slot.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale,
                            const Tensor& dlogits, int64_t start);

// lse (N) f32 holds sum_exp on entry and the log-sum-exp on return: lse = row_max + log(sum_exp);
// loss_sum (1) f32 += sum over the rows whose target (N) i32 is not kIgnoreTarget of (lse - target_logit). On the
// device: no host sync.
void cross_entropy_finish(const Tensor& row_max, const Tensor& target_logit, const Tensor& lse, const Tensor& targets,
                          const Tensor& loss_sum);

// Sum of squares of x, accumulated in double (for global-norm clipping). Waits for the device; inf or NaN
// in x gives inf or NaN (the fp16 overflow check reads it).
double sum_squares(const Tensor& x);
// The sum of sum_squares(x) over the tensors of xs, added in list order in double: the same value as that loop on
// the host, with one wait for the device instead of one per tensor (the global gradient norm over hundreds of
// parameter segments). Every tensor on one device, each of any float dtype; an empty list gives 0.
double sum_squares_total(const std::vector<Tensor>& xs);

// x = value, every element.
void fill(const Tensor& x, float value);
// out (f32) = the RandomFill's elements 0..numel-1 (core/random_fill.h: initial values, drawn where they
// are stored). Every device draws the host's bits.
void random_fill(const Tensor& out, const RandomFill& fill);

// AdamW (Loshchilov & Hutter) on flat fp32 buffers of equal numel, one step, `step` counted from 1:
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p),
// m_hat = m / (1 - b1^step), v_hat = v / (1 - b2^step). grad is read as grad * grad_scale.
// With decoupled = false it is Adam with L2 regularisation instead: g = grad * grad_scale + wd p feeds the
// moments and p -= lr m_hat / (sqrt(v_hat) + eps) (DeepSpeed's Adam with adam_w_mode false, torch's Adam).
struct AdamWParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  int64_t step = 1;
  float grad_scale = 1.0f;
  bool decoupled = true;
};
// `rounded`: undefined, or (n) bf16/f16 on param's device: it receives the updated param rounded to its dtype (as
// cast), in the same pass over memory (the offloaded optimizer's values for the device).
void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p,
                const Tensor& rounded = Tensor());

// Casts between storage types: dst = convert(src), same numel, any float dtype to any float dtype
// (round to nearest even; overflow to inf).
void cast(const Tensor& src, const Tensor& dst);

// A block of columns between two tables of the same rows and dtype: dst[r, dst_col + j] = src[r, src_col + j] for every
// row r and j < width, with src (N, Ws) and dst (N, Wd) read as the rows of their last dim (context parallelism's
// regrouping of heads, nn/context_split.h; LoRA's merged adapters' blocks, nn/lora.h). src and dst must not overlap.
void copy_columns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col, int64_t width);

// ---- Llama-family decoders: RMSNorm (whole rows and per head), rotary embedding, SwiGLU, grouped-query attention ----

// RMSNorm over the last dim, as transformers' LlamaRMSNorm: x (N, C), gamma (C), y (N, C), rstd (N) f32 saved:
// rstd = 1 / sqrt(mean(x^2) + eps) in fp32, xhat = x * rstd, y = gamma * xhat. Rounding order (16-bit X): xhat is
// rounded to X first and the product with gamma rounded again, because transformers casts the normalised fp32
// hidden states back to the input dtype before `weight * hidden_states`; in f32 both roundings are exact. y may be
// x (in place).
void rmsnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd, float eps = 1e-6f);
// dx (N, C) overwritten: rstd (g - xhat mean(g xhat)) with g = dy gamma and the unrounded xhat = x rstd.
// dgamma (C) f32 accumulates the sum over rows of dy * xhat, with xhat rounded to X as forward multiplied it.
// dx may be dy (in place).
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dgamma);
// The same with a residual gradient added: dx = (rmsnorm_backward's dx) + dres, dres (N, C) in X; dgamma
// accumulates as there. As layernorm_backward_add: on the CPU exactly rmsnorm_backward then add(dx, dres, dx); on
// CUDA the sum is formed in fp32 and rounded once. dx may share memory with dy, not with dres.
void rmsnorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                          const Tensor& dres, const Tensor& dx, const Tensor& dgamma);

// Rotary position embedding, transformers' rotate_half convention: each head's D dims split into two halves
// (dims i and i + D/2 rotate together), not interleaved pairs. x (B, T, ...) is read as rows of W = numel / (B T)
// elements holding D-wide heads back to back: (B, T, H*D), (B, T, H, D), or a fused qkv (B, T, (H + 2 Hkv) D).
// The first `heads` heads of each row are rotated by the row's position t = 0..T-1; for i < D/2,
//   y[i]       = x[i] cos[t, i] - x[i + D/2] sin[t, i]
//   y[i + D/2] = x[i + D/2] cos[t, i] + x[i] sin[t, i]
// which is transformers' x * cos + rotate_half(x) * sin with its (T, D) tables cat(c, c), cat(s, s). cos and sin are
// (T_max, D/2) f32 with T <= T_max (rows 0..T-1 are used; D = twice their last dim; rope_tables.h makes them).
// Columns from heads*D on are copied to y unchanged (not touched when y is x): with heads = H + Hkv on a fused qkv,
// q and k are rotated and v passes through. y has x's shape and may be x (in place); fp32 math, rounded once.
void rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, int heads, const Tensor& y);
// The transpose of the rotation (the inverse: the same with -sin): dx = R(t)^T dy, the rest copied. dx may be dy.
void rotary_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, int heads, const Tensor& dx);

// RMSNorm over each head of a fused projection (Qwen3's q_norm and k_norm): x (N, W) read as rows of D-wide heads back
// to back, as rotary_forward reads them, e.g. a fused qkv (B, T, (H + 2 Hkv) D). The first `heads` heads of each row
// are normalised with the gain q_gain (D), the next `kv_heads` with k_gain (D), each as rmsnorm_forward normalises a
// row of D values (the same rounding order: xhat rounded to X, then the product with the gain): rstd (N, H + Hkv)
// f32 saved, rstd = 1 / sqrt(mean over the head's D of x^2 + eps). Columns from (H + Hkv) D on are copied to y
// unchanged (not touched when y is x): with H and Hkv the projection's query and key heads, q and k are normalised and
// v passes through. y has x's shape and may be x (in place).
// A head may also be D of the `width` columns of a wider head whose other columns other devices hold (OLMoE's q and k,
// each normalised whole, under tensor parallelism: each slot holds its heads' columns). Then `sums` (N, H + Hkv) f32
// brings each head's statistic over its whole width, summed over the devices from head_norm_sums' parts: forward
// reads the sums of x^2 and takes rstd = 1 / sqrt(sums / width + eps); backward reads the sums of dy * gain * x and
// takes mean(g xhat) = rstd sums / width. Undefined sums (width 0): each head lies whole in its row, as above.
void head_norm_forward(const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, int heads, int kv_heads,
                       const Tensor& y, const Tensor& rstd, float eps, const Tensor& sums = {}, int64_t width = 0);
// dx (N, W) overwritten: each normalised head as rmsnorm_backward's dx with its gain, the other columns copied from
// dy. dq_gain and dk_gain (D) f32 accumulate the sums over rows and over their heads of dy * xhat, with xhat rounded
// to X as forward multiplied it, in a fixed order (the same bits every run). dx may be dy (in place).
void head_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, int heads,
                        int kv_heads, const Tensor& rstd, const Tensor& dx, const Tensor& dq_gain,
                        const Tensor& dk_gain, const Tensor& sums = {}, int64_t width = 0);
// This device's part of those sums: sums (N, H + Hkv) f32 overwritten with, for each row and each of its first
// H + Hkv heads of D columns, the sum over the head's D of a * b * gain (the q gain for the first H heads, the k gain
// for the next Hkv; 1 when the gains are undefined), in fp32 (double on the CPU). a and b (N, W) alike, e.g. x and x
// for the forward's, dy and x with the gains for the backward's.
void head_norm_sums(const Tensor& a, const Tensor& b, const Tensor& q_gain, const Tensor& k_gain, int heads,
                    int kv_heads, int64_t d, const Tensor& sums);

// SwiGLU on a fused projection: gate_up (N, 2F) holds gate in columns [0, F) and up in [F, 2F) of each row (the
// output of one projection by the stacked weight [W_gate; W_up]); y (N, F) = silu(gate) * up with
// silu(g) = g sigmoid(g): transformers' LlamaMLP act_fn(gate_proj(x)) * up_proj(x) for hidden_act "silu", in fp32
// and rounded once.
void swiglu_forward(const Tensor& gate_up, const Tensor& y);
// dgate_up (N, 2F) overwritten: dgate = dy up silu'(gate), silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g), and
// dup = dy silu(gate). dgate_up may be gate_up (in place: the projection output is then overwritten).
void swiglu_backward(const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up);

// Causal grouped-query self-attention on a fused projection: qkv (B, T, (H + 2 Hkv) D) laid out as [q | k | v] along
// the last dim with H = heads query heads and Hkv = kv_heads key/value heads: query head h at columns h*D of q,
// kv head g at columns g*D of k and of v. Query head h attends with kv head h / (H / Hkv), as transformers'
// repeat_kv (kv head g serves query heads g H/Hkv .. (g+1) H/Hkv - 1). H must be a multiple of Hkv; Hkv = H is
// multi-head attention (attention_forward's layout and result), Hkv = 1 multi-query attention.
// y (B, T, H*D) = softmax(q k^T / sqrt(D) + causal mask) v, heads concatenated; lse (B, H, T) f32 saved, as
// attention_forward. `block_bytes` changes time and memory, never the result: the bytes of dP a block of the CUDA
// deterministic backward may take (the config's tiles.attention_block_bytes, or the preflight's choice; 0: the rule's
// 4 GiB, cuda/scratch_sizes.h), which the forward takes too because the kernels it picks follow the blocks (a
// forward and its backward take the same path). The CPU backend has no blocks.
void attention_gqa_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                           int64_t block_bytes = 0);
// dqkv (B, T, (H + 2 Hkv) D) overwritten; dk and dv of each kv head are summed over the query heads it serves.
void attention_gqa_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                            const Tensor& dy, const Tensor& dqkv, int64_t block_bytes = 0);

// The same attention kept inside documents: documents (B, T) i32 gives each position's document, non-decreasing along
// T (documents packed into one sequence), and position t attends to the positions s <= t of its own document only
// (s at or after the first position holding its id). The causal attention above is the case of one document.
// Backends without it throw.
void attention_gqa_documents_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                                     const Tensor& y, const Tensor& lse);
void attention_gqa_documents_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                                      const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dqkv);

// ---- FP8 (Hopper's e4m3 and e5m2) with power-of-two scales per tensor, per row or per block ----
// A tensor goes to FP8 as q = fp8(x * s) (round to nearest even, saturating at the format's largest finite value) and
// back as x ~ q / s. The scale s of a block of elements (the whole tensor, a row, a 1x128 or 128x128 tile:
// Fp8Blocks, fp8_scale.h) whose largest magnitude is amax is the largest power of two with amax * s <= max (448 for
// e4m3, 57344 for e5m2), clamped to [2^-126, 2^126]; 1 when amax is 0. A power of two makes x * s exact, so q is the
// same on every backend. A non-finite amax (an inf or a NaN in the block) gives s = 1 and inv_scale NaN, so the
// product reads NaN and the overflow shows instead of saturating quietly. Scales of several blocks are laid out as
// fp8_scale_grid says (the layout Hopper's scaled products read), amax alike.

// amax (G) f32 = the largest |x| of each block of x's 2-D view (rows_of, cols_of) (any float dtype), or of its
// transpose (C, R) when `transposed`, cut into `blocks`; G = fp8_scale_grid(...).count, overwritten (padding 0); NaN
// for a block holding a NaN. blocks {}: one value, the whole tensor. On the device: no host sync.
void amax(const Tensor& x, const Tensor& amax, Fp8Blocks blocks = {}, bool transposed = false);
// x (R, C) in X, read as its 2-D view; amax (G) f32 on x's device as amax above writes it for the output's blocks
// (the tensor's own, or its maximum over a group of slots that together hold a logical tensor, so every slot scales
// alike). Writes q (R, C) and/or q_t (C, R) = q transposed (both E4M3 or both E5M2: their dtype picks the format),
// and inv_scale (G) f32 = 1 / s per block. `blocks` are blocks of the output written: with one scale (blocks {})
// either output or both; with more, exactly one of q (blocks of x) and q_t (blocks of x^T).
void fp8_quantize(const Tensor& x, const Tensor& amax, const Tensor& q, const Tensor& q_t, const Tensor& inv_scale,
                  Fp8Blocks blocks = {});
// d (M, N) = sum_k a[m, k] / s_a[m, k] * b[n, k] / s_b[n, k] + bias (N) + c (M, N), summed in fp32 and rounded once
// into d, where 1 / s_a is a_inv_scale's value for a's block holding (m, k) (a_blocks, fp8_scale_grid's layout) and
// 1 / s_b likewise. a and b are FP8 with K contiguous in both (the "TN" form Hopper's FP8 tensor cores take): e4m3 x
// e4m3, e4m3 x e5m2 or e5m2 x e4m3. d is X or f32; bias (optional) and c (optional) hold d's dtype; c may be d
// (accumulate: a weight gradient). On CUDA, K and N must be multiples of 16 (fp8_shape_ok), and the blocks one of
// Hopper's pairs: one scale each; one per row each ({1, 0}); {1, 128} with {128, 128} or {1, 128}; {128, 128} with
// {1, 128} (an operand in {1, 128} blocks with a multiple of 4 rows: cuBLASLt has no kernel for others). A product of
// two FP8 values is exact in fp32 and the scales are powers of two, so backends differ only in the order of the sum.
// `fast_accum`: CUDA may keep the tensor cores' partial sums in their own reduced precision
// (CUBLASLT_MATMUL_DESC_FAST_ACCUM: faster, less exact; recipes allow it for the forward product only); the CPU
// always sums in fp32.
void fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b, const Tensor& b_inv_scale,
                const Tensor& bias, const Tensor& c, const Tensor& d, bool fast_accum = false, Fp8Blocks a_blocks = {},
                Fp8Blocks b_blocks = {});
// Whether fp8_matmul takes a product of these sizes on every backend.
inline bool fp8_shape_ok(int64_t m, int64_t n, int64_t k) {
  return m > 0 && n % 16 == 0 && k % 16 == 0 && n > 0 && k > 0;
}

// ---- Dropout ----

// Counter-based dropout: y (N, C) = x * keep / (1 - p), x (N, C) one block of columns of a logical (rows, width)
// tensor whose row 0 is logical row `row0` and column 0 logical column `col0`. Element (i, j) is kept when
// uniform_at(seed, stream, (row0 + i) * width + col0 + j) (core/philox.h) exceeds p, so any device and any split of
// the rows or columns draws the same mask for the same logical element; applied to a gradient with the same keys
// it is the mask's backward. 0 <= p < 1. y may be x.
void dropout(const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t stream, int64_t row0, int64_t width,
             int64_t col0);

// ---- Mixture of experts: routing, tokens grouped by expert and back ----
// Legend: E experts, k experts per token, M = N k routed rows (one per choice of a token).

// The top-k router of transformers' MoE families (Qwen3-MoE, Mixtral, OLMoE): probs (N, E) = softmax of each row of
// logits (N, E) in fp32; idx (N, k) the k largest probabilities of each row, largest first (equal ones: the lower
// expert first); weights (N, k) their probabilities, divided by their sum when `normalize` (norm_topk_prob).
void moe_route(const Tensor& logits, int k, bool normalize, const Tensor& probs, const Tensor& idx,
               const Tensor& weights);
// The router's backward: dlogits (N, E) overwritten with the softmax's backward of dprobs, where dprobs is dweights
// (N, k) taken back through the division by the sum (with `normalize`) onto the chosen experts' probabilities, plus
// aux (E) on every row when defined (the load-balancing loss's gradient by a probability depends on its expert only).
void moe_route_backward(const Tensor& probs, const Tensor& idx, const Tensor& dweights, bool normalize,
                        const Tensor& aux, const Tensor& dlogits);
// The load-balancing loss's sums over a micro-batch: counts (E) += how many of idx's (N, k) choices name each expert,
// probsum (E) += the column sums of probs (N, E), each summed over rows in order. Accumulates.
void moe_route_stats(const Tensor& probs, const Tensor& idx, const Tensor& counts, const Tensor& probsum);
// The load-balancing loss added to a sum: sum (1) += scale * sum over e of counts[e] probsum[e]. Accumulates.
void moe_aux_loss(const Tensor& counts, const Tensor& probsum, float scale, const Tensor& sum);
// The routed rows grouped by expert, a stable sort of the choices: expert e's rows are [offsets[e], offsets[e + 1])
// of the M, in order of token then choice, and pos (N, k) gives the row of choice (t, s). offsets (E + 1),
// offsets[0] = 0 and offsets[E] = M. Every idx must be in [0, experts).
void moe_order(const Tensor& idx, int experts, const Tensor& pos, const Tensor& offsets);
// The rows of each expert, offsets[e + 1] - offsets[e] for e < E, on the host: it waits for the device. `rows` is M.
// On the counting device, which holds no values, the planner's routing assumption: the M rows spread evenly, the
// first M mod E experts taking one more (balanced routing).
std::vector<int64_t> moe_expert_rows(const Tensor& offsets, int64_t rows);
// Tokens to their routed rows: xg[pos[t, s]] = x[t] for each choice, x (N, C), xg (M, C).
void moe_gather(const Tensor& x, const Tensor& pos, const Tensor& xg);
// The experts' products over their rows, one per group g of rows[g] consecutive rows (rows on the host, summing to
// a's rows; an empty group does nothing): c rows of g = a rows of g @ op(b[g]) + beta c rows of g, with b the stacked
// (G, N, K) weights (op: b[g] transposed with trans_b, then (N, K); else (K, N)), a (M, K), c (M, N). Each group is one
// product as matmul computes it (c X or f32), but a group's row count changes every step: on CUDA it is not timed
// against cuBLASLt's other candidates (the heuristic's first choice runs).
void grouped_matmul(const Tensor& a, const Tensor& b, const Tensor& c, const std::vector<int64_t>& rows, bool trans_b,
                    float beta = 0.0f);
// The experts' weight gradients: dw[g] (G, N, K) += dy rows of g ^T @ x rows of g, dy (M, N), x (M, K), the groups as
// grouped_matmul's; linear_weight_grad per group, untimed as grouped_matmul. Accumulates.
void grouped_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw, const std::vector<int64_t>& rows);
// The routed rows back to their tokens: y[t] += sum over s of weights[t, s] yg[pos[t, s]], yg (M, C), y (N, C),
// weights (N, k) or undefined (each 1: the gather's backward). The sum over s is in order, in fp32 with y's value,
// rounded once. Accumulates.
void moe_combine(const Tensor& yg, const Tensor& pos, const Tensor& weights, const Tensor& y);
// moe_combine's backward: dyg[pos[t, s]] = weights[t, s] dy[t] and dweights[t, s] = dy[t] . yg[pos[t, s]] (the dot
// in fp32), both overwritten. dy (N, C), yg, dyg (M, C), weights, dweights (N, k).
void moe_combine_backward(const Tensor& dy, const Tensor& yg, const Tensor& pos, const Tensor& weights,
                          const Tensor& dyg, const Tensor& dweights);

}  // namespace tandem::ops
