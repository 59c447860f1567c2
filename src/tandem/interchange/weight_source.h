// Where initial weights come from: a consolidated safetensors file in Tandem's names (tandem export), or a
// Hugging Face model folder (config.json with model.safetensors, or shards listed by model.safetensors.index.json).
// Both are read through mmap, element ranges at a time, so each rank reads only the shard it owns.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/spec/model_config.h"

namespace tandem::interchange {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The file or folder, for messages.
  virtual const std::string& path() const = 0;
  // Why the source cannot give Tandem's parameter `name` at `shape`, as " ...;" phrases; "" when it can.
  virtual std::string check(const std::string& name, const Shape& shape) const = 0;
  // The tensors it holds, in its own names, that give none of `names` (Tandem's parameters).
  virtual std::vector<std::string> unused(const std::set<std::string>& names) const = 0;
  // Elements [begin, end) of Tandem's logical tensor `name` (row-major), converted to float.
  virtual void read(const std::string& name, int64_t begin, int64_t end, float* out) const = 0;
};

// True for a folder holding config.json (a Hugging Face model).
bool is_hf_folder(const std::string& path);

// A Hugging Face folder read through the name map of `model` (which must be of the family its config.json
// describes), or else a safetensors file in Tandem's names.
std::unique_ptr<WeightSource> open_weights(const std::string& path, const spec::ModelConfig& model);

}  // namespace tandem::interchange
