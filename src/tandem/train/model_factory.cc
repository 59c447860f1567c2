// build_model: one case per model family, each built by nn's builder for it from the config's typed settings.
#include "tandem/train/model_factory.h"

#include <variant>

#include "tandem/core/error.h"
#include "tandem/nn/llama.h"
#include "tandem/nn/models.h"

namespace tandem::train {
namespace {

nn::MlpConfig nn_config(const config::MlpConfig& m) {
  nn::MlpConfig c;
  c.sizes = m.sizes;
  c.activation = m.activation;
  return c;
}

nn::GptConfig nn_config(const config::GptConfig& g) {
  nn::GptConfig c;
  c.vocab_size = g.vocab_size;
  c.seq_len = g.seq_len;
  c.dim = g.dim;
  c.layers = g.layers;
  c.heads = g.heads;
  c.tie_word_embeddings = g.tie_word_embeddings;
  return c;
}

// Llama's attention_bias biases q, k, v and o; qkv_bias (Qwen2) q, k and v alone.
nn::LlamaConfig nn_config(const config::LlamaConfig& l) {
  nn::LlamaConfig c;
  c.vocab_size = l.vocab_size;
  c.seq_len = l.seq_len;
  c.hidden_size = l.hidden_size;
  c.intermediate_size = l.intermediate_size;
  c.num_hidden_layers = l.num_hidden_layers;
  c.num_attention_heads = l.num_attention_heads;
  c.num_key_value_heads = l.num_key_value_heads;
  c.head_dim = l.head_dim;
  c.max_position_embeddings = l.max_position_embeddings;
  c.rms_norm_eps = l.rms_norm_eps;
  c.rope_theta = l.rope_theta;
  if (l.rope_scaling.type == config::RopeType::Llama3) {
    c.rope_scaling.rope_type = "llama3";
    c.rope_scaling.factor = l.rope_scaling.factor;
    c.rope_scaling.low_freq_factor = l.rope_scaling.low_freq_factor;
    c.rope_scaling.high_freq_factor = l.rope_scaling.high_freq_factor;
    c.rope_scaling.original_max_position_embeddings = l.rope_scaling.original_max_position_embeddings;
  }
  c.tie_word_embeddings = l.tie_word_embeddings;
  c.qkv_bias = l.attention_bias || l.qkv_bias;
  c.o_bias = l.attention_bias;
  return c;
}

struct Build {
  nn::TpSlot tp;
  nn::Model operator()(const config::MlpConfig& m) const { return nn::build_mlp(nn_config(m), tp); }
  nn::Model operator()(const config::GptConfig& g) const { return nn::build_gpt(nn_config(g), tp); }
  nn::Model operator()(const config::LlamaConfig& c) const { return nn::build_llama(nn_config(c), tp); }
};

}  // namespace

nn::Model build_model(const config::ModelConfig& model, nn::TpSlot tp) { return std::visit(Build{tp}, model); }

}  // namespace tandem::train
