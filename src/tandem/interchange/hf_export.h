// Writing a Tandem model's consolidated weights as a Hugging Face model folder: config.json, and the weights in
// Hugging Face's names and layouts in model.safetensors, or in shards model-0000k-of-0000n.safetensors listed
// by model.safetensors.index.json when they exceed the shard size.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tandem/checkpoint/progress.h"
#include "tandem/core/tensor.h"
#include "tandem/spec/model_config.h"

namespace tandem::interchange {

struct HostWeights {
  Shape shape;
  const float* data;  // shape_numel(shape) floats
};

struct HfExportOptions {
  bool bf16 = false;                            // else fp32
  uint64_t max_shard_bytes = 5'000'000'000ull;  // transformers' default max_shard_size, "5GB"
  checkpoint::Progress* progress = nullptr;     // told the bytes of weights as they are written
};

// Writes into the existing folder `dir`. `weights` must hold exactly the parameters of `model`. Returns the
// number of files of weights written.
int write_hf_folder(const std::string& dir, const spec::ModelConfig& model,
                    const std::map<std::string, HostWeights>& weights, const HfExportOptions& options);

}  // namespace tandem::interchange
