#include "tandem/parallel/pipeline/chunk_runner.h"

namespace tandem::parallel::pipeline {

ChunkRunner::ChunkRunner(nn::Model& model, bool recompute, nn::Model::LayerHooks* hooks, Device& device,
                         nn::HostCheckpoints* host)
    : model_(model), recompute_(recompute), hooks_(hooks), host_(recompute ? host : nullptr), device_(device) {}

Tensor ChunkRunner::forward(const LayerRange& range, int, int key, const Tensor& x, const nn::Batch& batch) {
  TANDEM_CHECK(!held_.count(key), "chunk runner: key ", key, " is already held");
  std::vector<nn::Saved> saved;
  const PurposeScope scope(device_, MemoryPurpose::Activations);
  Tensor y = model_.forward_range(range.first, range.second, x, saved, recompute_, hooks_, batch, host_);
  held_.emplace(key, std::move(saved));
  return y;
}

Tensor ChunkRunner::forward_only(const LayerRange& range, const Tensor& x, const nn::Batch& batch) {
  const PurposeScope scope(device_, MemoryPurpose::Activations);
  std::vector<nn::Saved> saved;
  return model_.forward_range(range.first, range.second, x, saved, recompute_, hooks_, batch);
}

Tensor ChunkRunner::backward(const LayerRange& range, int, int key, const Tensor& dy, const nn::Batch& batch) {
  const auto it = held_.find(key);
  TANDEM_CHECK(it != held_.end(), "chunk runner: no forward kept for key ", key);
  std::vector<nn::Saved> saved = std::move(it->second);
  held_.erase(it);
  const PurposeScope scope(device_, MemoryPurpose::Transient);
  return model_.backward_range(range.first, range.second, dy, saved, recompute_, hooks_, batch, host_);
}

}  // namespace tandem::parallel::pipeline
