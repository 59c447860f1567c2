// The model families as plain values, with no JSON and no parsing: what config/ reads a "model" object into and
// what nn/ builds from, the same struct on both sides (config::MlpConfig and nn::MlpConfig name this one).
#pragma once

#include <cstdint>
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
  bool tie_word_embeddings = false;  // the head's weight is the embedding's table
  bool attention_bias = false;       // biases on the q, k, v and o projections (Llama)
  bool qkv_bias = false;             // biases on q, k and v only (Qwen2)
};

}  // namespace tandem::spec
