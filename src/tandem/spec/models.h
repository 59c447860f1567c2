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
// Qwen3 adds an RMSNorm over each head of q and of k (qk_norm below).
enum class LlamaFamily {
  Llama,    // LlamaForCausalLM, "llama"
  Mistral,  // MistralForCausalLM, "mistral": no biases; sliding_window
  Qwen2,    // Qwen2ForCausalLM, "qwen2": biases on q, k and v (qkv_bias); use_sliding_window, max_window_layers
  Qwen3,    // Qwen3ForCausalLM, "qwen3": q_norm and k_norm; attention_bias; Qwen2's sliding-window keys
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
};

// Qwen3's q_norm and k_norm: an RMSNorm (eps rms_norm_eps, a gain of head_dim) over each head of q and of k, after
// the projection and before the rotation.
inline bool qk_norm(const LlamaConfig& c) { return c.family == LlamaFamily::Qwen3; }

}  // namespace tandem::spec
