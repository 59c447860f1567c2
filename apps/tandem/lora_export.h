// `tandem export` of a LoRA run's checkpoint (which holds the adapters alone): --format peft writes a PEFT adapter
// folder; --merge writes the base model with the adapters merged, as a Hugging Face folder (--format hf) or one file in
// Tandem's names (--format safetensors). The base comes from the run's config, as on resume.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/config/config.h"

namespace tandem::app {

struct LoraExport {
  std::string checkpoint;  // the checkpoint folder
  std::string to;          // the folder (peft, hf) or file (safetensors) to write, already checked by run_export
  std::string format;      // "peft", "hf" or "safetensors"
  bool bf16 = false;       // hf --merge: the dtype of the weights
  uint64_t max_shard_bytes = 0;
  bool merge = false;
};

// Writes the export; `saved` is the checkpoint's config (with "lora"). Returns the command's exit code.
int export_lora(const LoraExport& e, const config::Json& saved);

}  // namespace tandem::app
