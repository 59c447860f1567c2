// The lines a run prints once about its LoRA adapters and its FP8 projections (Trainer::describe_lora, describe_fp8).
#include <algorithm>
#include <cstdio>

#include "tandem/train/trainer.h"

namespace tandem::train {

std::string Trainer::describe_lora() const {
  // Logical parameters (global shapes), every tp slot's and stage's together: the model as one device holds it.
  int64_t trainable = 0, frozen = 0, adapters = 0;
  for (const nn::Parameter* p : engine_->model().parameters()) {
    (p->trainable ? trainable : frozen) += shape_numel(p->global_shape);
    adapters += p->adapter ? 1 : 0;
  }
  const spec::LoraConfig& l = cfg_.lora;
  char line[512];
  std::snprintf(line, sizeof line,
                "  lora: r %lld, lora_alpha %g (scaling %g%s), lora_dropout %g; %lld adapters, %lld trainable "
                "parameters (%.3g%%) on a frozen base of %lld in %s\n",
                static_cast<long long>(l.r), l.lora_alpha, l.scaling(), l.use_rslora ? ", rsLoRA" : "", l.lora_dropout,
                static_cast<long long>(adapters / 2), static_cast<long long>(trainable),
                100.0 * static_cast<double>(trainable) / static_cast<double>(std::max<int64_t>(trainable + frozen, 1)),
                static_cast<long long>(frozen), dtype_name(engine_->store().compute_dtype()).c_str());
  return line;
}

std::string Trainer::describe_fp8() const {
  const nn::Model::Fp8Use use = engine_->model().fp8_use();
  char line[512];
  std::snprintf(
      line, sizeof line,
      "  fp8 (%s): %d of this rank's %d block projections run their products in e4m3 (inputs, weights) and "
      "%s (gradients)%s; attention, norms, embeddings, the head and the loss in %s\n",
      spec::fp8_recipe_name(cfg_.fp8.recipe), use.fp8, use.projections, dtype_name(cfg_.fp8.gradients).c_str(),
      use.fp8 < use.projections ? " (the others: fewer features than fp8.min_features, or not multiples of 16)" : "",
      dtype_name(engine_->store().compute_dtype()).c_str());
  return line;
}

}  // namespace tandem::train
