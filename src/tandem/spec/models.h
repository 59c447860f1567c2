// The model families as plain values, with no JSON and no parsing: what config/ reads a "model" object into and
// what nn/ builds from, the same struct on both sides (nn::MlpConfig names this one too).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::spec {

// "type": "mlp". A classifier: Linear(sizes[0] -> sizes[1]), activation, ..., Linear(-> sizes.back()), no
// activation after the last (nn::build_mlp).
struct MlpConfig {
  std::vector<int64_t> sizes;       // input features, hidden widths..., classes
  std::string activation = "relu";  // "relu" | "gelu"
};

// "type": "gpt". A GPT-2 style decoder (nn::build_gpt).
struct GptConfig {
  int64_t vocab_size = 0, seq_len = 0, dim = 0, layers = 0;
  int heads = 0;
  bool tie_word_embeddings = false;  // the head uses the token embedding's weight
};

// "type": "llama". A Llama decoder (RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP), with Hugging
// Face LlamaConfig's names (nn::build_llama). 0 in a defaulted field takes the default named beside it
// (nn::resolve_llama fills them; the config writes them all).
enum class RopeType {
  None,    // "rope_scaling": null
  Llama3,  // "rope_type": "llama3": Llama 3's frequency-dependent scaling of the rotary frequencies
};
struct RopeScaling {
  RopeType type = RopeType::None;
  // Llama3 only; the defaults are Llama 3.1's.
  double factor = 8, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_position_embeddings = 8192;
};
// The Hugging Face architecture a llama model was read as, and is exported as (config.json's "architectures" and
// "model_type"): Llama, Mistral and Qwen2 compute the same function on the same weights, their config keys differ;
// Qwen3 adds an RMSNorm over each head of q and of k (qk_norm below); Mixtral and Qwen3-MoE are Mistral's and Qwen3's
// attention with mixture-of-experts MLPs (MoeConfig); Qwen2-MoE is Qwen2's attention with them and a shared expert.
enum class LlamaFamily {
  Llama,     // LlamaForCausalLM, "llama"
  Mistral,   // MistralForCausalLM, "mistral": no biases; sliding_window
  Qwen2,     // Qwen2ForCausalLM, "qwen2": biases on q, k and v (qkv_bias); use_sliding_window, max_window_layers
  Qwen3,     // Qwen3ForCausalLM, "qwen3": q_norm and k_norm; attention_bias; Qwen2's sliding-window keys
  Mixtral,   // MixtralForCausalLM, "mixtral": Mistral's attention, every MLP a mixture of experts
  Qwen3Moe,  // Qwen3MoeForCausalLM, "qwen3_moe": Qwen3's attention, MLPs mixtures of experts or dense by layer
  Qwen2Moe,  // Qwen2MoeForCausalLM, "qwen2_moe": Qwen2's attention, as Qwen3-MoE's MLPs with a gated shared expert
  Olmoe,     // OlmoeForCausalLM, "olmoe": q and k each normalised over the whole projection; every MLP a mixture
};
// A family's names: "family" in Tandem's config (the Hugging Face model_type) and the architecture it is exported as.
struct LlamaFamilyNames {
  LlamaFamily family;
  const char* name;
  const char* architecture;
};
inline constexpr LlamaFamilyNames kLlamaFamilies[] = {
    {LlamaFamily::Llama, "llama", "LlamaForCausalLM"},
    {LlamaFamily::Mistral, "mistral", "MistralForCausalLM"},
    {LlamaFamily::Qwen2, "qwen2", "Qwen2ForCausalLM"},
    {LlamaFamily::Qwen3, "qwen3", "Qwen3ForCausalLM"},
    {LlamaFamily::Mixtral, "mixtral", "MixtralForCausalLM"},
    {LlamaFamily::Qwen3Moe, "qwen3_moe", "Qwen3MoeForCausalLM"},
    {LlamaFamily::Qwen2Moe, "qwen2_moe", "Qwen2MoeForCausalLM"},
    {LlamaFamily::Olmoe, "olmoe", "OlmoeForCausalLM"},
};
inline const LlamaFamilyNames& names_of(LlamaFamily f) {
  for (const LlamaFamilyNames& n : kLlamaFamilies)
    if (n.family == f) return n;
  return kLlamaFamilies[0];
}
// The family named `name` ("llama", ..., "qwen3_moe"); nullopt for no family.
inline std::optional<LlamaFamily> family_named(const std::string& name) {
  for (const LlamaFamilyNames& n : kLlamaFamilies)
    if (name == n.name) return n.family;
  return std::nullopt;
}
// The family whose attention a family has (Mistral's for Mixtral, Qwen3's for Qwen3-MoE, Qwen2's for Qwen2-MoE;
// itself otherwise): its biases, norms and sliding-window keys.
inline LlamaFamily attention_family(LlamaFamily f) {
  switch (f) {
    case LlamaFamily::Mixtral:
      return LlamaFamily::Mistral;
    case LlamaFamily::Qwen3Moe:
      return LlamaFamily::Qwen3;
    case LlamaFamily::Qwen2Moe:
      return LlamaFamily::Qwen2;
    default:
      return f;
  }
}

// The mixture-of-experts MLPs of Mixtral, Qwen3-MoE and Qwen2-MoE (nn/moe.h), with transformers' key names. A sparse
// layer's MLP routes each token to num_experts_per_tok of num_experts SwiGLU experts of moe_intermediate_size (and in
// Qwen2-MoE adds a shared expert's output, gated per token); the others keep the dense MLP of intermediate_size.
struct MoeConfig {
  int num_experts = 0;                   // E ("num_experts"; Mixtral's "num_local_experts"); 0: no sparse layer
  int num_experts_per_tok = 0;           // k
  int64_t moe_intermediate_size = 0;     // an expert's F (Mixtral: its intermediate_size)
  bool norm_topk_prob = false;           // the k weights divided by their sum (Mixtral: always)
  int64_t decoder_sparse_step = 1;       // Qwen3-MoE: layer i is sparse when (i + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;  // ... and i is not listed here
  double router_aux_loss_coef = 0.001;   // the load-balancing loss's weight
  // transformers adds coef x the load-balancing loss to the training loss only when this is true (its default false).
  bool output_router_logits = false;
  // Qwen2-MoE: every token also goes through a dense SwiGLU MLP of this width, its output weighted by
  // sigmoid(x . shared_expert_gate); 0: none.
  int64_t shared_expert_intermediate_size = 0;
};
struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t seq_len = 0;  // the training length ("seq_len", not a Hugging Face key): the rotary tables' positions
  int64_t hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;          // 0: num_attention_heads; divides it
  int64_t head_dim = 0;                 // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;  // 0: seq_len; at least seq_len
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;         // the head's weight is the embedding's table
  bool attention_bias = false;              // biases on the q, k, v and o projections (Llama)
  bool qkv_bias = false;                    // biases on q, k and v only (Qwen2)
  LlamaFamily family = LlamaFamily::Llama;  // "family"
  // The families' sliding-window keys as read, written back on export. Tandem's attention is full, so a window it
  // would apply (Mistral's shorter than seq_len, Qwen2's and Qwen3's use_sliding_window) is refused by the config.
  std::optional<int64_t> sliding_window;  // Mistral, Qwen2, Qwen3; none: null
  bool use_sliding_window = false;        // Qwen2, Qwen3
  int64_t max_window_layers = 28;         // Qwen2, Qwen3 (transformers' default)
  MoeConfig moe;                          // Mixtral, Qwen3-MoE
};

// Qwen3's q_norm and k_norm: an RMSNorm (eps rms_norm_eps, a gain of head_dim) over each head of q and of k, after
// the projection and before the rotation.
inline bool qk_norm(const LlamaConfig& c) { return attention_family(c.family) == LlamaFamily::Qwen3; }
// OLMoE's: one RMSNorm over all of q (a gain of H head_dim) and one over all of k (Hkv head_dim), at the same place.
inline bool qk_norm_whole(const LlamaConfig& c) { return c.family == LlamaFamily::Olmoe; }

// Whether decoder layer i's MLP is a mixture of experts.
inline bool sparse_layer(const LlamaConfig& c, int64_t i) {
  const MoeConfig& m = c.moe;
  if (m.num_experts <= 0 || m.decoder_sparse_step <= 0 || (i + 1) % m.decoder_sparse_step != 0) return false;
  for (int64_t dense : m.mlp_only_layers)
    if (dense == i) return false;
  return true;
}
// The weight of the load-balancing loss in the training loss: router_aux_loss_coef with output_router_logits, else 0.
inline double balance_coef(const LlamaConfig& c) {
  return c.moe.num_experts > 0 && c.moe.output_router_logits ? c.moe.router_aux_loss_coef : 0.0;
}

}  // namespace tandem::spec
