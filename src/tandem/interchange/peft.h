// Hugging Face PEFT adapter folders, as PeftModel.save_pretrained writes them and PeftModel.from_pretrained reads them:
// adapter_model.safetensors read in Tandem's adapter names, adapter_config.json and adapter_model.safetensors written
// from a checkpoint's adapters, and adapters merged into the base model's weights. Which modules carry adapters, and
// under which names, is peft_names.h's; reading adapter_config.json into the config is config/'s.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/interchange/hf_export.h"
#include "tandem/interchange/weight_source.h"
#include "tandem/spec/lora.h"
#include "tandem/spec/model_config.h"

namespace tandem::interchange {

// `dir`/adapter_model.safetensors as a WeightSource in Tandem's adapter names ("layers.0.qkv.q.lora_A" for PEFT's
// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"; an expert parameter's A (E, r, in) from PEFT's
// (E r, in) and B (E, out, r) from PEFT's (out, r E), B_e[o, k] = lora_B[o, k E + e]). check() names a missing
// tensor and a shape other than A (r, in), B (out, r) (an expert parameter's (E r, in), (out, r E)); unused() the
// file's tensors that are not adapters of `lora`'s targets (another model's, DoRA's magnitudes, modules_to_save).
std::unique_ptr<WeightSource> open_peft_adapter(const std::string& dir, const spec::ModelConfig& model,
                                                const spec::LoraConfig& lora);

// Writes `dir`/adapter_config.json (peft_type LORA, task_type CAUSAL_LM, `base_model` as base_model_name_or_path, r,
// lora_alpha, lora_dropout, target_modules, target_parameters, use_rslora, bias "none", and PEFT's off values for the
// rest) and `dir`/adapter_model.safetensors in fp32 with PEFT's names and layouts, from `adapters` in Tandem's names
// (every target's A and B, whole). "all-linear" is written as the modules it selected, as PEFT writes it. Returns the
// tensors written.
int write_peft_folder(const std::string& dir, const spec::ModelConfig& model, const spec::LoraConfig& lora,
                      const std::string& base_model, const std::map<std::string, HostWeights>& adapters);

// Merges the adapters into the base weights (Tandem's names): rows [row, row + out) of each adapted module's weight
// += scaling * B A, and each expert's W_e += scaling * B_e A_e of an adapted expert parameter, in fp32 (double sums).
void merge_lora(const spec::ModelConfig& model, const spec::LoraConfig& lora,
                const std::map<std::string, HostWeights>& adapters, std::map<std::string, std::vector<float>>& weights);

}  // namespace tandem::interchange
