// Where LoRA adapters sit, in Hugging Face PEFT's terms and in Tandem's: every module of a gpt (GPT-2) or llama model
// that can carry an adapter, under the name PEFT matches target_modules against and the Tandem site that carries it
// (nn/lora.h), with the rows of Tandem's fused weight it adapts. PEFT's matching rules are applied here; the
// adapters' files are peft.h's.
#pragma once

#include <string>
#include <vector>

#include "tandem/spec/lora.h"
#include "tandem/spec/model_config.h"

namespace tandem::interchange {

// A module's adapter (target_modules), or a mixture of experts' stacked parameter's (target_parameters, `experts` > 0:
// one adapter of rank r per expert, A (E, r, in) and B (E, out, r) in Tandem, on weight (E, out, in)).
struct LoraSite {
  std::string module;   // Hugging Face's module name in the base model: "model.layers.0.self_attn.q_proj"; an expert
                        // parameter's own name: "model.layers.1.mlp.experts.gate_up_proj"
  std::string site;     // Tandem's: "layers.0.qkv.q" (nn::LoraTargets); "layers.1.moe.gate_up"
  std::string weight;   // the Tandem weight whose rows it adapts: "layers.0.qkv.weight"
  int64_t row = 0;      // the first of those rows
  int64_t in = 0;       // the module's input width (A is (r, in))
  int64_t out = 0;      // its output width (B is (out, r))
  int64_t experts = 0;  // E for an expert parameter, else 0
  // The module PEFT names the adapter's tensors after (peft_lora_a_name): `module` for a module; for an expert
  // parameter its experts module, "model.layers.1.mlp.experts", or "...experts.base_layer" for gate_up_proj when
  // down_proj is targeted too (PEFT wraps the first of the module's parameters first, and the second wrapper holds the
  // first as its base_layer). lora_targets sets it.
  std::string peft;
};

// Every module of the model that can carry an adapter, in the model's order (the projections of each block; not
// the embeddings or the head).
std::vector<LoraSite> lora_sites(const spec::ModelConfig& model);

// A mixture of experts' stacked expert parameters that can carry adapters (target_parameters), in the model's order:
// each sparse layer's gate_up_proj (E, 2F, C) then down_proj (E, C, F), Tandem's moe.gate_up and moe.down weights.
std::vector<LoraSite> expert_parameter_sites(const spec::ModelConfig& model);

// The sites `lora.target_modules` selects as PEFT selects modules: a name in the list equal to the module's name or
// to its end after a dot ("q_proj", "self_attn.q_proj"), "all-linear" every site, or with `target_regex` the sites
// whose whole name the expression matches; then the expert parameters `lora.target_parameters` selects by the same
// rule for a list ("mlp.experts.gate_up_proj"). Throws, naming them and the modules there are, when a target selects
// no site, or selects the embeddings or the head (which Tandem does not adapt); and when a target_parameters entry
// selects no expert parameter, naming the ones there are.
std::vector<LoraSite> lora_targets(const spec::ModelConfig& model, const spec::LoraConfig& lora);

// PEFT's tensor names in adapter_model.safetensors for an adapter on `module` (a LoraSite's `peft`):
// "base_model.model.<module>.lora_A.weight" (r, in) and ".lora_B.weight" (out, r); an expert parameter's are
// (E r, in) and (out, r E), peft.h's layout.
std::string peft_lora_a_name(const std::string& module);
std::string peft_lora_b_name(const std::string& module);

// Tandem's parameter names of the adapter at `site` (nn::Linear::add_lora): "<site>.lora_A" and "<site>.lora_B".
std::string tandem_lora_a_name(const std::string& site);
std::string tandem_lora_b_name(const std::string& site);

}  // namespace tandem::interchange
