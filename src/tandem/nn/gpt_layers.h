// The GPT-2 style layers (the same function as PyTorch's reference model): token + learned position
// embedding, the pre-LN transformer block, and the final LayerNorm + untied vocabulary head.
// Legend: B batch, T time, C channels (dim), H heads, V vocabulary.
#pragma once

#include "tandem/nn/activation.h"
#include "tandem/nn/layernorm.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/lora.h"

namespace tandem::nn {

// tokens (B, T) i32 -> x (B, T, C) = wte[tokens] + wpe[0..T). Parameters "wte.weight" (V, C), "wpe.weight" (T_max, C).
// Vocabulary-parallel: slot i holds rows [i V/tp, (i+1) V/tp) of wte and looks up only the tokens in its
// range (zeros elsewhere); the sum over tp completes every row. wpe is replicated and added after the sum.
// Context-parallel (the batch's split): the tokens are this shard's T / cp of each sequence, and each takes wpe's row
// at its place in the whole sequence (ContextSplit::runs), its gradient going to that row.
class GptEmbedding final : public Layer {
 public:
  GptEmbedding(int64_t vocab_size, int64_t max_seq_len, int64_t dim, TpSlot tp = {});
  Tensor forward(const Tensor& tokens, Saved& saved) override { return forward(tokens, Batch{}, saved); }
  Tensor backward(const Tensor& dy, Saved& saved) override { return backward(dy, Batch{}, saved); }
  Tensor forward(const Tensor& tokens, const Batch& batch, Saved& saved) override;
  // Returns undefined: tokens have no gradient.
  Tensor backward(const Tensor& dy, const Batch& batch, Saved& saved) override;
  Shape output_shape(const Shape& in) const override { return {in.at(0), in.at(1), dim_}; }

 private:
  int64_t vocab_, max_seq_, dim_;
  TpSlot tp_;
  Parameter* wte_;  // (V / tp, C)
  Parameter* wpe_;  // (T_max, C)
};

// x + attn(ln1(x)), then + mlp(ln2(.)); attn = proj(causal_attention(qkv(.))), mlp = out(gelu(fc(.))), fc's bias
// added in the GELU's pass (bias_gelu_forward).
// Parameters "blocks.<i>.{ln1,qkv,proj,ln2,fc,out}.{weight,bias}".
// Tensor-parallel: qkv and fc are column-parallel (slot i owns heads [i H/tp, (i+1) H/tp) and 4C/tp MLP
// columns), proj and out row-parallel; LayerNorms are replicated. Context-parallel (the batch's split): attention
// regroups q | k | v by heads (ContextSplit::gather_sequence) and its output back, as the llama block does; the rest
// runs on the shard's own tokens.
class GptBlock final : public Layer {
 public:
  GptBlock(int index, int64_t dim, int heads, TpSlot tp = {});
  // Freezes the block and adds LoRA adapters (lora.h) at the sites of `targets` it has: "blocks.<i>.qkv" (GPT-2's
  // c_attn, one adapter over q, k and v), "blocks.<i>.proj", "blocks.<i>.fc", "blocks.<i>.out". Returns how many.
  int add_lora(const LoraTargets& targets);
  // Runs qkv, proj, fc and out in FP8 where their shapes allow (Linear::use_fp8); returns how many do.
  int use_fp8(const spec::Fp8Config& config);
  // x (B, T, C) -> y (B, T, C); the batch's documents, when it has them, keep attention inside each document.
  Tensor forward(const Tensor& x, Saved& saved) override { return forward(x, Batch{}, saved); }
  Tensor backward(const Tensor& dy, Saved& saved) override { return backward(dy, Batch{}, saved); }
  Tensor forward(const Tensor& x, const Batch& batch, Saved& saved) override;
  Tensor backward(const Tensor& dy, const Batch& batch, Saved& saved) override;

 private:
  int heads_;  // this slot's heads
  LayerNorm ln1_;
  Linear qkv_;   // C -> 3C
  Linear proj_;  // C -> C
  LayerNorm ln2_;
  Linear fc_;  // C -> 4C
  Activation gelu_;
  Linear out_;  // 4C -> C
};

// logits (B, T, V) = head(lnf(x)); "lnf.{weight,bias}", "head.weight" (V, C), no bias. Tensor-parallel: the
// head is column-parallel and each slot returns its vocabulary slice (B, T, V / tp) for the
// vocabulary-parallel loss. `tied`: the head reads the embedding's "wte.weight" (a replica of it) instead of a
// weight of its own, as GPT-2 does.
class GptHead final : public Layer {
 public:
  GptHead(int64_t dim, int64_t vocab_size, TpSlot tp = {}, bool tied = false);
  Tensor forward(const Tensor& x, Saved& saved) override { return forward(x, Batch{}, saved); }
  Tensor backward(const Tensor& dy, Saved& saved) override { return backward(dy, Batch{}, saved); }
  // With a loss sink in the batch the head computes the loss itself (head_loss, in chunks of rows): in a training
  // forward it keeps only its input's norm and returns nothing, and its backward (dy undefined) computes the loss and
  // the gradients; in evaluation its forward computes the loss. Without one it returns the logits.
  Tensor forward(const Tensor& x, const Batch& batch, Saved& saved) override;
  Tensor backward(const Tensor& dy, const Batch& batch, Saved& saved) override;
  Shape output_shape(const Shape& in) const override { return head_.output_shape(in); }

 private:
  LayerNorm lnf_;
  Linear head_;
};

}  // namespace tandem::nn
