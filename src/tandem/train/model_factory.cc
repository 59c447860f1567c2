// build_model: one case per model family, each built by nn's builder for it from the config's own struct.
#include "tandem/train/model_factory.h"

#include <variant>

#include "tandem/core/error.h"
#include "tandem/interchange/peft_names.h"
#include "tandem/nn/llama.h"
#include "tandem/nn/models.h"

namespace tandem::train {
namespace {

struct Build {
  nn::TpSlot tp;
  const nn::LoraTargets* lora;
  const spec::Fp8Config& fp8;
  nn::Model operator()(const spec::MlpConfig& m) const {
    if (lora) TANDEM_FAIL("LoRA adapts gpt and llama models, not an mlp");
    if (fp8.enabled) TANDEM_FAIL("\"fp8\" runs the projections of gpt and llama blocks, not an mlp's layers");
    return nn::build_mlp(m, tp);
  }
  nn::Model operator()(const spec::GptConfig& g) const { return nn::build_gpt(g, tp, lora, fp8); }
  nn::Model operator()(const spec::LlamaConfig& c) const { return nn::build_llama(c, tp, lora, fp8); }
};

}  // namespace

nn::LoraTargets lora_targets(const spec::ModelConfig& model, const spec::LoraConfig& lora) {
  nn::LoraTargets t;
  t.options.r = lora.r;
  t.options.scaling = static_cast<float>(lora.scaling());
  t.options.dropout = static_cast<float>(lora.lora_dropout);
  t.options.init = lora.init;
  for (const interchange::LoraSite& s : interchange::lora_targets(model, lora)) t.sites.insert(s.site);
  return t;
}

nn::Model build_model(const spec::ModelConfig& model, nn::TpSlot tp, const spec::LoraConfig& lora,
                      const spec::Fp8Config& fp8) {
  if (!lora.enabled) return std::visit(Build{tp, nullptr, fp8}, model);
  const nn::LoraTargets targets = lora_targets(model, lora);
  return std::visit(Build{tp, &targets, fp8}, model);
}

}  // namespace tandem::train
