// LoRA's weights outside a checkpoint: an adapter folder of PEFT's read into the engine's adapters
// (lora.from_pretrained), and the frozen base a LoRA checkpoint was trained on (its checkpoints hold the adapters
// alone), for export.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/parallel/engine.h"
#include "tandem/train/checkpoint.h"

namespace tandem::train {

// Collective. Reads `dir`/adapter_model.safetensors (PEFT's names and shapes) into the adapters of `lora` on
// `model`, each rank the elements it owns. Refuses, before changing anything, a missing tensor, a wrong shape, a tensor
// that is no adapter of the targets and a weight that is not finite.
void load_peft_adapter(const std::string& dir, const spec::ModelConfig& model, const spec::LoraConfig& lora,
                       parallel::Engine& engine);

// The base model of a LoRA run, by Tandem's parameter names, as logical fp32 tensors: from its config's
// model.from_pretrained folder (read again), else drawn from its seed as the run drew it.
std::map<std::string, LogicalTensor> lora_base_weights(const config::Json& saved_config);

}  // namespace tandem::train
