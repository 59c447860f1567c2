// Builds the model a config's "model" names, through nn, for one tensor-parallel slot, with the adapters its "lora"
// asks for. With spec/model_config.cc, the one place that tells the model families apart: a new family is one more
// case here.
#pragma once

#include "tandem/nn/lora.h"
#include "tandem/nn/model.h"
#include "tandem/spec/fp8.h"
#include "tandem/spec/lora.h"
#include "tandem/spec/model_config.h"

namespace tandem::train {

// With `lora` enabled, the model is frozen and carries adapters at the modules its targets select; with `fp8` enabled
// its blocks' projections run in FP8.
nn::Model build_model(const spec::ModelConfig& model, nn::TpSlot tp = {}, const spec::LoraConfig& lora = {},
                      const spec::Fp8Config& fp8 = {});

// The adapters' sites and options of `lora` on `model` (interchange/peft_names.h selects the sites); throws when a
// target selects nothing.
nn::LoraTargets lora_targets(const spec::ModelConfig& model, const spec::LoraConfig& lora);

}  // namespace tandem::train
