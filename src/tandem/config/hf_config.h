// Hugging Face model configs (config.json) to and from Tandem's "model" object. GPT2LMHeadModel becomes a "gpt"
// model; LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM become a "llama" model that keeps
// Hugging Face's own key names. What Tandem's models cannot compute is refused by name; keys that change nothing in
// training (token ids, dtype, cache) are dropped, and any other unknown key is reported in one warning.
#pragma once

#include <string>
#include <vector>

#include "tandem/config/config.h"

namespace tandem::config {

// The "model" object for the Hugging Face config `hf_config_json`, read from the folder `dir` (named in
// messages). Without seq_len: the caller adds it. Unknown keys are named in one line added to `warnings`.
Json model_from_hf_config(const Json& hf_config_json, const std::string& dir,
                          std::vector<std::string>* warnings = nullptr);

// A config.json that transformers loads for a Tandem model (gpt or llama); `torch_dtype` is "float32" or
// "bfloat16".
Json hf_config_from_model(const ModelConfig& model, const std::string& torch_dtype);

// DIR/config.json parsed; errors say what is missing or malformed.
Json read_hf_config(const std::string& dir);

// The "model": {"from_pretrained": DIR, "seq_len": N} hook of validate(): replaces `model` by the model of
// DIR/config.json with seq_len, keeping "from_pretrained" so that the weights are loaded from DIR too. Other
// keys given beside it must agree with DIR's config. Idempotent. Does nothing without from_pretrained.
void expand_from_pretrained(Json& model, std::vector<std::string>* warnings = nullptr);

}  // namespace tandem::config
