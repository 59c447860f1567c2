// Internal to tandem_config: the "lora" object (PEFT's LoraConfig keys and defaults) and the adapter_config.json of a
// PEFT adapter folder it may start from. Which modules the targets select is decided with the model
// (interchange/peft_names.h), not here.
#pragma once

#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/spec/lora.h"

namespace tandem::config {

// Checks the config's "lora" object (when present) against the schema, writes its defaults (PEFT's, the settings
// table's rows; the family's default target_modules) and, with "from_pretrained", takes r, lora_alpha, target_modules,
// target_parameters, use_rslora and bias from the folder's adapter_config.json (a key given beside it must agree;
// lora_dropout given beside it wins, and is refused above 0 beside target_parameters). Idempotent. `model_type` is the
// validated model's type.
void validate_lora(Json& cfg, const std::string& model_type);

// PEFT's default target_modules for a model type (transformers' llama: q_proj and v_proj; GPT-2: c_attn).
std::vector<std::string> default_lora_targets(const std::string& model_type);

}  // namespace tandem::config
