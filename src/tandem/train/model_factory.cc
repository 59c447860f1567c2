// build_model: one case per model family, each built by nn's builder for it from the config's typed settings.
#include "tandem/train/model_factory.h"

#include <variant>

#include "tandem/core/error.h"
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

// Stands where nn::build_llama will be called, from an nn::LlamaConfig filled as nn_config does for the gpt (Llama's
// attention_bias sets both qkv_bias and o_bias).
nn::Model build_llama_model(const config::LlamaConfig&, nn::TpSlot) { TANDEM_FAIL("llama models are not built yet"); }

struct Build {
  nn::TpSlot tp;
  nn::Model operator()(const config::MlpConfig& m) const { return nn::build_mlp(nn_config(m), tp); }
  nn::Model operator()(const config::GptConfig& g) const { return nn::build_gpt(nn_config(g), tp); }
  nn::Model operator()(const config::LlamaConfig& c) const { return build_llama_model(c, tp); }
};

}  // namespace

nn::Model build_model(const config::ModelConfig& model, nn::TpSlot tp) { return std::visit(Build{tp}, model); }

}  // namespace tandem::train
