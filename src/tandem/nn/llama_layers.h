// The Llama-family decoder layers (the same function as transformers' LlamaForCausalLM, and Qwen2's, Qwen3's and
// Mistral's with their options): the token embedding, the pre-RMSNorm block with rotary grouped-query attention and a
// SwiGLU MLP, and the final RMSNorm + vocabulary head. Legend: B batch, T time, C hidden size, H query heads, Hkv
// key/value heads, D head dim, F intermediate size, V vocabulary.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "tandem/nn/linear.h"
#include "tandem/nn/moe.h"
#include "tandem/ops/rope_tables.h"

namespace tandem::nn {

// RMSNorm over the last dim with a gain ("weight", ones), as transformers' LlamaRMSNorm (ops::rmsnorm_forward).
class RmsNorm final : public Layer {
 public:
  RmsNorm(std::string name, int64_t dim, float eps);
  // x (..., C) -> y (..., C)
  Tensor forward(const Tensor& x, Saved& saved) override;
  Tensor backward(const Tensor& dy, Saved& saved) override;
  // backward plus a residual gradient (..., C) in the same pass: the input gradient of a pre-norm block's skip
  // connection and its RMSNorm branch together, what backward then ops::add give.
  Tensor backward_add(const Tensor& dy, const Tensor& dres, Saved& saved);

 private:
  int64_t dim_;
  float eps_;
  Parameter* weight_;  // (C)
};

// The rotary embedding's cos and sin tables (T, D/2) f32 that every block of one model reads: made on the host
// the first time a block runs on a device that holds data, copied there and kept for the model's life (accounted as
// MemoryPurpose::Other: T*D*4 bytes, 1 MiB at T = 4096, D = 64). The planner's counting device gets the tensors
// but not the values: T D sines and cosines cost it seconds a model at 512k positions, and it reads none.
class RopeCache {
 public:
  RopeCache(std::vector<float> inverse_frequencies, int64_t positions)
      : frequencies_(std::move(inverse_frequencies)), positions_(positions) {}
  int64_t positions() const { return positions_; }
  int64_t half() const { return static_cast<int64_t>(frequencies_.size()); }
  // The tables on `device`.
  const Tensor& cos(Device& device);
  const Tensor& sin(Device& device);

 private:
  void place(Device& device);
  std::vector<float> frequencies_;  // (D/2)
  int64_t positions_ = 0;
  ops::RopeTables host_;  // empty until a device that holds data needs it
  Device* device_ = nullptr;
  Tensor cos_, sin_;
};

// tokens (B, T) i32 -> x (B, T, C) = embed[tokens]; "embed.weight" (V, C). No positions: the blocks rotate q and k.
// Vocabulary-parallel as GptEmbedding: slot i holds rows [i V/tp, (i+1) V/tp) and the sum over tp completes rows.
class LlamaEmbedding final : public Layer {
 public:
  LlamaEmbedding(int64_t vocab_size, int64_t max_seq_len, int64_t dim, TpSlot tp = {});
  Tensor forward(const Tensor& tokens, Saved& saved) override;
  Tensor backward(const Tensor& dy, Saved& saved) override;  // returns undefined: tokens have no gradient
  Shape output_shape(const Shape& in) const override { return {in.at(0), in.at(1), dim_}; }

 private:
  int64_t vocab_, max_seq_, dim_;
  TpSlot tp_;
  Parameter* weight_;  // (V / tp, C)
};

// The shape of one decoder block.
struct LlamaBlockShape {
  int64_t dim = 0;             // C
  int64_t intermediate = 0;    // F
  int heads = 0;               // H
  int kv_heads = 0;            // Hkv
  int64_t head_dim = 0;        // D
  float eps = 1e-6f;           // RMSNorm's
  bool qkv_bias = false;       // q, k and v projections biased (Qwen2; Llama's attention_bias)
  bool o_bias = false;         // the output projection biased (Llama's attention_bias)
  bool qk_norm = false;        // q and k normalised per head before the rotation (Qwen3's q_norm and k_norm)
  bool qk_norm_whole = false;  // q and k each normalised as a whole before the rotation (OLMoE's; heads = kv_heads)
  MoeShape moe;                // experts > 0: the MLP is a mixture of experts (moe.h) in place of gate_up and down
};

// x + o(attention(rope(qkv(attn_norm(x))))), then + down(swiglu(gate_up(mlp_norm(.)))): q, k, v in one projection
// (rows q then k then v), rotated in place (ops::rotary_forward over its H + Hkv first heads), grouped-query
// attention on it (ops::attention_gqa_forward); gate and up in one projection (rows gate then up), SwiGLU on it.
// With qk_norm, each head of q and of k is first normalised over its D values (ops::head_norm_forward, gains q_norm
// and k_norm): attention reads rope(head_norm(qkv)), and the projection's output is kept for the norm's gradient.
// With qk_norm_whole (OLMoE) q and k are each normalised over all their heads at once, token by token; under context
// parallelism that runs before the regrouping, where a shard holds every head of its own tokens (of its tp slot).
// Parameters "layers.<i>.{attn_norm,qkv,o,mlp_norm,gate_up,down}.weight", "layers.<i>.qkv.bias" with qkv_bias,
// "layers.<i>.o.bias" with o_bias, "layers.<i>.{q_norm,k_norm}.weight" (D) with qk_norm; a sparse block (moe) has
// "layers.<i>.moe.{router,gate_up,down}.weight" (MoeMlp) in place of gate_up and down, replicated over tp, and runs
// whole (no tiles).
// Tensor-parallel: qkv column-parallel with its q, k and v parts split separately (slot i owns query heads
// [i H/tp, (i+1) H/tp) and the kv heads [i Hkv/tp, (i+1) Hkv/tp) they attend with), gate_up column-parallel with
// gate and up split separately, o and down row-parallel; the norms are replicated. q_norm and k_norm see only this
// slot's heads, so their gradients are summed over tp (as transformers' "replicated_with_grad_allreduce"). Whole
// (OLMoE), q_norm and k_norm are split as the heads (slot i holds entries [i H D / tp, (i+1) H D / tp)), each
// token's sums of squares (and in backward, of dy * gain * x) are summed over tp, and each slot normalises its part.
class LlamaBlock final : public Layer {
 public:
  LlamaBlock(int index, const LlamaBlockShape& shape, std::shared_ptr<RopeCache> rope, TpSlot tp = {});
  // Freezes the block and adds LoRA adapters (lora.h) at the sites of `targets` it has: "layers.<i>.qkv.{q,k,v}",
  // "layers.<i>.o", "layers.<i>.gate_up.{gate,up}", "layers.<i>.down", or a sparse block's shared expert's
  // (MoeMlp::add_lora). Returns how many.
  int add_lora(const LoraTargets& targets);
  // Runs qkv, o, gate_up and down in FP8 where their shapes allow (Linear::use_fp8); returns how many do.
  int use_fp8(const spec::Fp8Config& config);
  // x (B, T, C) -> y (B, T, C); the batch's documents, when it has them, keep attention inside each document. Under
  // context parallelism (batch.context) T is this shard's tokens, and attention regroups by heads to see them all.
  Tensor forward(const Tensor& x, Saved& saved) override { return forward(x, Batch{}, saved); }
  Tensor backward(const Tensor& dy, Saved& saved) override { return backward(dy, Batch{}, saved); }
  // The MLP runs in tiles of rows when a whole pass's intermediates would pass tiles.h's budget (or
  // batch.tiles.mlp_tokens says so): then only its input is kept, and the backward recomputes each tile before its
  // gradient.
  Tensor forward(const Tensor& x, const Batch& batch, Saved& saved) override;
  Tensor forward_for_backward(const Tensor& x, const Batch& batch, Saved& saved) override;
  Tensor backward(const Tensor& dy, const Batch& batch, Saved& saved) override;

 private:
  // Rows per MLP tile for a pass of `rows` rows: `rows` when it runs whole.
  int64_t mlp_tile(const Batch& batch, int64_t rows, DType dtype) const;
  // The forward; `output` false (activation checkpointing's second forward) skips a tiled MLP, whose result no one
  // reads there.
  Tensor run(const Tensor& x, const Batch& batch, Saved& saved, bool output);
  // The query and key/value heads attention runs on this shard: the slot's own by a ring (or without context
  // parallelism), by heads its 1 / cp of them (the kv heads repeated where the slot has fewer than cp).
  std::pair<int, int> attention_heads(const ContextSplit& cp) const;
  // One tile's h = swiglu(gate_up(mlp_norm(x1))): x1 (n, C) -> h (n, F / tp), gate_up (n, 2F / tp) kept for the
  // SwiGLU's gradient, what the norm and gate_up save for their backward in `norm` and `up`.
  Tensor mlp_tile_up(const Tensor& x1, Saved& norm, Saved& up, Tensor& gate_up);
  // dx1 (B, T, C) = dy + the MLP branch's input gradient, whole or tile by tile.
  Tensor mlp_backward(const Tensor& dy, const Batch& batch, Saved& saved);
  // qk_norm's forward over `heads` of q and `kv_heads` of k (1 and 1 when whole): qkv (B, T, (H + 2 Hkv) D) -> the
  // normed copy, with qkv kept in `raw` and its (B T, heads + kv_heads) rstd in `rstd` for the backward.
  Tensor head_norm(const Tensor& qkv, int heads, int kv_heads, Tensor& raw, Tensor& rstd) const;
  // qk_norm's backward in place on dqkv (B, Ta, (H + 2 Hkv) D / (tp cp)) per head, or (B, T, (H + 2 Hkv) D / tp)
  // when whole (before the regrouping under cp), from the projection's output `raw` and its rstd; the per-head gains'
  // gradients summed over tp.
  void head_norm_backward(const Tensor& dqkv, const Tensor& raw, const Tensor& rstd, int heads, int kv_heads);
  // The one rule for a whole q and k split over tp slots: their statistics span every slot. a, b (B, T, (H + 2 Hkv) D
  // / tp) -> (B T, 2) f32, each token's sums of a * b * gain over all of q and all of k (ops::head_norm_sums, summed
  // over tp); undefined when the slot holds them whole (per-head norms, or one slot).
  Tensor whole_sums(const Tensor& a, const Tensor& b, const Tensor& q_gain, const Tensor& k_gain) const;
  // The width those sums span, H D (= Hkv D), or 0 without them.
  int64_t whole_width(const Tensor& sums) const;

  int heads_, kv_heads_;  // this slot's
  float eps_;             // the norms'
  TpSlot tp_;
  std::shared_ptr<RopeCache> rope_;
  Parameter* q_norm_ = nullptr;  // (D), with qk_norm; (H D / tp), this slot's heads, with qk_norm_whole
  Parameter* k_norm_ = nullptr;  // (D), with qk_norm; (Hkv D / tp), this slot's heads, with qk_norm_whole
  bool norm_whole_ = false;      // qk_norm_whole: q and k each one head of the per-head norm
  RmsNorm attn_norm_;
  Linear qkv_;  // C -> (H + 2 Hkv) D
  Linear o_;    // H D -> C
  RmsNorm mlp_norm_;
  std::unique_ptr<Linear> gate_up_;  // C -> 2F; null in a sparse block
  std::unique_ptr<Linear> down_;     // F -> C; null in a sparse block
  std::unique_ptr<MoeMlp> moe_;      // a sparse block's MLP; null in a dense one
};

// logits (B, T, V) = head(norm(x)); "norm.weight" (C), "head.weight" (V, C), no bias. Tensor-parallel: the head is
// column-parallel and each slot returns its vocabulary slice (B, T, V / tp) for the vocabulary-parallel loss.
// `tied` (tie_word_embeddings): the head reads the embedding's "embed.weight" (a replica of it, split alike) instead
// of a weight of its own.
class LlamaHead final : public Layer {
 public:
  LlamaHead(int64_t dim, int64_t vocab_size, float eps, TpSlot tp = {}, bool tied = false);
  Tensor forward(const Tensor& x, Saved& saved) override { return forward(x, Batch{}, saved); }
  Tensor backward(const Tensor& dy, Saved& saved) override { return backward(dy, Batch{}, saved); }
  // With a loss sink in the batch the head computes the loss itself (head_loss, in chunks of rows): in a training
  // forward it keeps only its input's norm and returns nothing, and its backward (dy undefined) computes the loss and
  // the gradients; in evaluation its forward computes the loss. Without one it returns the logits.
  Tensor forward(const Tensor& x, const Batch& batch, Saved& saved) override;
  Tensor backward(const Tensor& dy, const Batch& batch, Saved& saved) override;
  Shape output_shape(const Shape& in) const override { return head_.output_shape(in); }

 private:
  RmsNorm norm_;
  Linear head_;
};

}  // namespace tandem::nn
