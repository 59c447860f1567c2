// build_model: one case per model family, each built by nn's builder for it from the config's own struct.
#include "tandem/train/model_factory.h"

#include <variant>

#include "tandem/core/error.h"
#include "tandem/nn/llama.h"
#include "tandem/nn/models.h"

namespace tandem::train {
namespace {

struct Build {
  nn::TpSlot tp;
  nn::Model operator()(const config::MlpConfig& m) const { return nn::build_mlp(m, tp); }
  nn::Model operator()(const config::GptConfig& g) const { return nn::build_gpt(g, tp); }
  nn::Model operator()(const config::LlamaConfig& c) const { return nn::build_llama(c, tp); }
};

}  // namespace

nn::Model build_model(const config::ModelConfig& model, nn::TpSlot tp) { return std::visit(Build{tp}, model); }

}  // namespace tandem::train
