// Builds the model a config's "model" names, through nn, for one tensor-parallel slot, with the adapters its "lora"
// asks for. With spec/model_config.cc, the one place that tells the model families apart: a new family is one more
// case here.
#pragma once

#include "tandem/nn/lora.h"
#include "tandem/nn/model.h"
#include "tandem/spec/lora.h"
#include "tandem/spec/model_config.h"

namespace tandem::train {

// With `lora` enabled, the model is frozen and carries adapters at the modules its targets select.
nn::Model build_model(const spec::ModelConfig& model, nn::TpSlot tp = {}, const spec::LoraConfig& lora = {});

// The adapters' sites and options of `lora` on `model` (interchange/peft_names.h selects the sites); throws when a
// target selects nothing.
nn::LoraTargets lora_targets(const spec::ModelConfig& model, const spec::LoraConfig& lora);

}  // namespace tandem::train
