// The model families a config can name, as typed values (no JSON), and what a model's family alone decides: the data
// it consumes, the loss rows of a sample, the planner's FLOPs beyond 6 x parameters, and whether a layout can hold
// it. This file and train/model_factory.cc (which builds each family through nn) are the only places that tell the
// families apart: a new one is one more alternative of ModelConfig, a case in each function of model_config.cc
// (std::visit makes a missing one a compile error) and a case in the factory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tandem::config {

// "type": "mlp". A classifier: Linear(sizes[0] -> sizes[1]), activation, ..., Linear(-> sizes.back()), no
// activation after the last (nn::build_mlp). The structs here are what the config says; nn has its own, which the
// factory fills, so nn does not depend on the config.
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
// Face LlamaConfig's names. Built by nn::build_llama once nn has it (train/model_factory.cc).
enum class RopeType {
  None,    // "rope_scaling": null
  Llama3,  // "rope_type": "llama3": Llama 3's frequency-dependent scaling of the rotary frequencies
};
struct RopeScaling {
  RopeType type = RopeType::None;
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;  // Llama3 only
  int64_t original_max_position_embeddings = 0;                  // Llama3 only
};
struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t seq_len = 0;  // the training length ("seq_len", not a Hugging Face key)
  int64_t hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;          // default num_attention_heads; divides it
  int64_t head_dim = 0;                 // default hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;  // default seq_len; at least seq_len
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // biases on the q, k, v and o projections
  bool qkv_bias = false;        // biases on q, k and v only (Qwen2)
};

using ModelConfig = std::variant<MlpConfig, GptConfig, LlamaConfig>;

// What a model reads and predicts: token sequences (tokens: seq_len ids below vocab_size) or feature vectors and
// classes. A model built in code states its own (data::make_dataset takes it).
struct ModelIO {
  bool tokens = false;
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
  int64_t features = 0;
  int64_t classes = 0;
};

// The config's "model.type": "mlp", "gpt" or "llama".
std::string model_type(const ModelConfig& model);

ModelIO model_io(const ModelConfig& model);

// Rows of the loss one sample gives: its seq_len tokens for a language model, 1 for a classifier.
int64_t rows_per_sample(const ModelConfig& model);

// Model FLOPs per loss row on top of 6 x parameters: the attention, 12 L d T per token with d the width of the
// heads (a gpt's dim, a llama's num_attention_heads x head_dim); 0 for an mlp.
double extra_flops_per_row(const ModelConfig& model);

// Throws Error, saying what to change, when the model cannot be cut into `pp` x `virtual_stages` pipeline chunks
// (by the stage map `stages` of gpt blocks or llama decoder layers when given, inclusive [first, last] ranges) and
// split over `tp` tensor-parallel slots (heads, key/value heads, vocabulary and the llama MLP's width; the widths
// between paired mlp linears).
void check_layout(const ModelConfig& model, int pp, int tp, int virtual_stages,
                  const std::vector<std::pair<int64_t, int64_t>>& stages);

}  // namespace tandem::config
