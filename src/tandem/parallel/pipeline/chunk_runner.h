// ChunkRunner: one chunk's forward or backward for one micro-batch, and what each forward keeps for its backward,
// by key. The executor owns the order of the actions; the runner owns their state.
// Forward runs under the activations purpose, backward under transients (what the accounts call them).
// The executor makes its chunk calls through ChunkCalls: the ChunkRunner runs the layers; the planner puts one of its
// own in front of it on its counting device (plan/chunk_replay.h), which accounts most calls without running them.
#pragma once

#include <map>
#include <vector>

#include "tandem/nn/model.h"
#include "tandem/parallel/pipeline/partition.h"

namespace tandem::parallel::pipeline {

class ChunkCalls {
 public:
  virtual ~ChunkCalls() = default;
  // y = the chunk's layers on x (undefined when its head computes the loss: Model::forward_range); what backward
  // needs is kept under `key`. `batch`: the micro-batch's (nn/batch.h), the same object for its forward and backward.
  virtual Tensor forward(const LayerRange& range, int chunk, int key, const Tensor& x, const nn::Batch& batch) = 0;
  // d(input) from d(output), releasing what was kept under `key`; undefined when the chunk takes tokens.
  virtual Tensor backward(const LayerRange& range, int chunk, int key, const Tensor& dy, const nn::Batch& batch) = 0;
  // y = the chunk's layers on x, keeping nothing (evaluation): what the layers save is dropped as the call returns.
  virtual Tensor forward_only(const LayerRange& range, const Tensor& x, const nn::Batch& batch) = 0;
  // Keys whose backward has not run yet.
  virtual size_t held() const = 0;
};

class ChunkRunner final : public ChunkCalls {
 public:
  // `host` (null: none): with `recompute`, the kept layer inputs wait in host memory (nn/host_checkpoints.h).
  ChunkRunner(nn::Model& model, bool recompute, nn::Model::LayerHooks* hooks, Device& device,
              nn::HostCheckpoints* host = nullptr);
  ChunkRunner(const ChunkRunner&) = delete;
  ChunkRunner& operator=(const ChunkRunner&) = delete;

  Tensor forward(const LayerRange& range, int chunk, int key, const Tensor& x, const nn::Batch& batch) override;
  Tensor backward(const LayerRange& range, int chunk, int key, const Tensor& dy, const nn::Batch& batch) override;
  Tensor forward_only(const LayerRange& range, const Tensor& x, const nn::Batch& batch) override;
  size_t held() const override { return held_.size(); }

  // What the layers run with, for calls in front of this runner that run them too.
  nn::Model& model() const { return model_; }
  bool recompute() const { return recompute_; }
  nn::Model::LayerHooks* hooks() const { return hooks_; }
  nn::HostCheckpoints* host() const { return host_; }

 private:
  nn::Model& model_;
  bool recompute_;
  nn::Model::LayerHooks* hooks_;
  nn::HostCheckpoints* host_;
  Device& device_;
  std::map<int, std::vector<nn::Saved>> held_;
};

}  // namespace tandem::parallel::pipeline
