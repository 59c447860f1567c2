// The Llama family of decoders (Llama 2 and 3, Qwen2, Qwen3's dense models, Mistral without sliding windows):
// transformers' LlamaForCausalLM (and Qwen3ForCausalLM's q_norm and k_norm), built from the layers of llama_layers.h
// through the same public API a user's own model uses.
#pragma once

#include <cstdint>

#include "tandem/nn/lora.h"
#include "tandem/nn/model.h"
#include "tandem/nn/tensor_parallel.h"
#include "tandem/ops/rope_tables.h"
#include "tandem/spec/fp8.h"
#include "tandem/spec/models.h"

namespace tandem::nn {

// transformers' LlamaConfig fields that decide the function and the parameters, plus the training sequence length:
// the config's own struct (spec/models.h).
using LlamaConfig = spec::LlamaConfig;

// What the block builds from the config's bias flags: Llama's attention_bias biases q, k, v and o; Qwen2's
// qkv_bias q, k and v alone.
inline bool qkv_biased(const LlamaConfig& c) { return c.attention_bias || c.qkv_bias; }
inline bool o_biased(const LlamaConfig& c) { return c.attention_bias; }

// The config's rope_scaling as the rotary tables take it.
ops::RopeScaling rope_scaling_of(const LlamaConfig& c);

// The config with its defaults filled in; throws Error naming the field and what to change when the shape is not
// a decoder (or, given tp > 1, cannot be split over tp slots: heads, kv heads, intermediate size and vocabulary
// must divide by it).
LlamaConfig resolve_llama(const LlamaConfig& cfg, int tp = 1);

// Layers: the embedding, one per block ("layers.<i>"), the final norm with the head, so pipeline stages cut between
// blocks. Parameters "embed.weight" (V, C); per block "layers.<i>.attn_norm.weight" (C), "layers.<i>.qkv.weight"
// ((H + 2 Hkv) D, C) rows q then k then v (and ".bias" when qkv_biased), "layers.<i>.o.weight" (C, H D) (and
// ".bias" when o_biased), "layers.<i>.mlp_norm.weight" (C), "layers.<i>.gate_up.weight" (2F, C) rows gate then up,
// "layers.<i>.down.weight" (C, F), with spec::qk_norm "layers.<i>.q_norm.weight" and "layers.<i>.k_norm.weight" (D);
// "norm.weight" (C), "head.weight" (V, C), or with tie_word_embeddings a replica of
// "embed.weight" (Parameter::replica: the model lists the table once). Initialised as gpt: N(0, 0.02)
// matrices and embedding, ones for the norms, zeros for biases, keyed by name and element (any layout alike).
// Tensor-parallel as llama_layers.h describes; the logits are then vocabulary-parallel.
// With `lora`, every parameter above is frozen and LoRA adapters are added at its sites (LlamaBlock::add_lora), each
// of which must exist.
// `fp8`: the blocks' projections run in FP8 where their shapes allow (Model::fp8_use counts them).
Model build_llama(const LlamaConfig& cfg, TpSlot tp = {}, const LoraTargets* lora = nullptr,
                  const spec::Fp8Config& fp8 = {});
// V C + L (2C + (H + 2 Hkv) D C + H D C + 3 F C [+ (H + 2 Hkv) D] [+ C] [+ 2 D]) + C [+ V C untied], computed without
// building the model: every logical parameter once (a tied head adds none).
int64_t llama_parameter_count(const LlamaConfig& cfg);

}  // namespace tandem::nn
