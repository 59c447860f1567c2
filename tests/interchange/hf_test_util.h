// What the Hugging Face interchange tests share: a Llama config.json as transformers writes one, a model object checked
// and read as a config reads it, and a model's name map by Tandem name.
#pragma once

#include <map>
#include <string>

#include "tandem/config/config.h"
#include "tandem/config/hf_config.h"
#include "tandem/interchange/hf_names.h"

namespace tandem::interchange::testing {

using config::Json;

// A model object, as a config would hold it, checked and read as the config reads it.
inline spec::ModelConfig typed(const Json& model) { return config::model_config(config::validate_model(model)); }

// A tiny LlamaForCausalLM's config.json (hidden 32, 2 layers, 4 heads over 2 kv heads, intermediate 48).
inline Json llama_hf(bool tied) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", 64},
          {"hidden_size", 32},
          {"intermediate_size", 48},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"max_position_embeddings", 16},
          {"rms_norm_eps", 1e-6},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", tied},
          {"rope_parameters", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}};
}

// The name map of `model` by Tandem parameter name.
inline std::map<std::string, HfMapping> maps_of(const spec::ModelConfig& model) {
  std::map<std::string, HfMapping> out;
  for (const HfMapping& m : hf_name_map(model)) out.emplace(m.name, m);
  return out;
}

}  // namespace tandem::interchange::testing
