// The Llama family of decoders (Llama 2 and 3, Qwen2, Mistral without sliding windows): transformers'
// LlamaForCausalLM, built from the layers of llama_layers.h through the same public API a user's own model uses.
#pragma once

#include <cstdint>

#include "tandem/nn/model.h"
#include "tandem/nn/tensor_parallel.h"
#include "tandem/ops/rope_tables.h"

namespace tandem::nn {

// The fields of transformers' LlamaConfig that decide the function and the parameters, with its meanings, plus the
// training sequence length. 0 in a defaulted field takes the default named beside it.
struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t seq_len = 0;  // the training sequence length: the rotary tables hold this many positions
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;          // 0: num_attention_heads (multi-head attention)
  int64_t head_dim = 0;                 // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;  // 0: seq_len; seq_len may not exceed it
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  ops::RopeScaling rope_scaling;     // rope_type "default" (none) or "llama3" with its four numbers
  bool tie_word_embeddings = false;  // the head's weight is embed.weight
  bool qkv_bias = false;             // q, k, v projections biased (Qwen2; Llama's attention_bias)
  bool o_bias = false;               // the output projection biased too (Llama's attention_bias)
};

// The config with its defaults filled in; throws Error naming the field and what to change when the shape is not
// a decoder (or, given tp > 1, cannot be split over tp slots: heads, kv heads, intermediate size and vocabulary
// must divide by it).
LlamaConfig resolve_llama(const LlamaConfig& cfg, int tp = 1);

// Layers: the embedding, one per block ("layers.<i>"), the final norm with the head, so pipeline stages cut between
// blocks. Parameters "embed.weight" (V, C); per block "layers.<i>.attn_norm.weight" (C), "layers.<i>.qkv.weight"
// ((H + 2 Hkv) D, C) rows q then k then v (and ".bias" with qkv_bias), "layers.<i>.o.weight" (C, H D) (and
// ".bias" with o_bias), "layers.<i>.mlp_norm.weight" (C), "layers.<i>.gate_up.weight" (2F, C) rows gate then up,
// "layers.<i>.down.weight" (C, F); "norm.weight" (C), "head.weight" (V, C), or with tie_word_embeddings a replica of
// "embed.weight" (Parameter::replica: the model lists the table once). Initialised as gpt: N(0, 0.02)
// matrices and embedding, ones for the norms, zeros for biases, keyed by name and element (any layout alike).
// Tensor-parallel as llama_layers.h describes; the logits are then vocabulary-parallel.
Model build_llama(const LlamaConfig& cfg, TpSlot tp = {});
// V C + L (2C + (H + 2 Hkv) D C + H D C + 3 F C [+ (H + 2 Hkv) D] [+ C]) + C [+ V C untied], computed without building
// the model: every logical parameter once (a tied head adds none).
int64_t llama_parameter_count(const LlamaConfig& cfg);

}  // namespace tandem::nn
