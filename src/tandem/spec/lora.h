// LoRA adapters as plain values, with no JSON and no parsing: what config/ reads the "lora" object into (Hugging Face
// PEFT's LoraConfig names and defaults) and what the model factory, nn and the PEFT interchange take. Which modules a
// target list selects is the interchange's to say (interchange/peft_names.h), from Hugging Face's module names.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::spec {

// init_lora_weights: how fresh adapters start (an adapter read from a PEFT folder keeps its own values).
enum class LoraInit {
  Default,   // true: A kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)); B zeros
  Random,    // false: both as torch's nn.Linear initialises them (B then U(-1/sqrt(r), 1/sqrt(r)): not zero)
  Gaussian,  // "gaussian": A N(0, 1/r), B zeros
};

struct LoraConfig {
  bool enabled = false;  // the config has a "lora" object
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0;  // on each adapter's input, while training
  // PEFT's target_modules: names matched against the end of each module's Hugging Face name ("q_proj" selects every
  // layer's model.layers.<i>.self_attn.q_proj; "mlp.c_proj" only GPT-2's MLP one), or, when `target_regex` is set,
  // one regular expression that a module's whole name must match. The config writes PEFT's default for the family
  // when none is given.
  std::vector<std::string> target_modules;
  std::string target_regex;
  // PEFT's target_parameters: a mixture of experts' stacked expert parameters ("mlp.experts.gate_up_proj",
  // "mlp.experts.down_proj"), matched as target_modules' list entries are against each parameter's Hugging Face name
  // ("model.layers.<i>.mlp.experts.gate_up_proj"); each matched one carries an adapter of rank r per expert. Empty:
  // none.
  std::vector<std::string> target_parameters;
  bool use_rslora = false;  // scaling alpha / sqrt(r) instead of alpha / r
  LoraInit init = LoraInit::Default;
  std::string from_pretrained;  // a PEFT adapter folder (adapter_config.json, adapter_model.safetensors), or ""

  double scaling() const {
    return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r)) : lora_alpha / static_cast<double>(r);
  }
};

}  // namespace tandem::spec
