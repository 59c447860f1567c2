// ChunkRunner: one chunk's forward or backward for one micro-batch, and what each forward keeps for its backward,
// by key. The executor owns the order of the actions; the runner owns their state.
// On a counting device (the planner's) the runner runs a chunk's layers for real until its forward and its
// backward each have the same effect twice in a row (the same bytes by purpose at the call's highest point and at
// its end, the same work, the same output) and the two effects fit together; from then on it replays that effect
// on the device's accounts without running the layers. A step of hundreds of micro-batches then costs the planner a
// few of them, and what it measures is still the engine's own behaviour.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "tandem/device/counting_device.h"
#include "tandem/nn/model.h"
#include "tandem/parallel/pipeline/partition.h"

namespace tandem::parallel::pipeline {

class ChunkRunner {
 public:
  ChunkRunner(nn::Model& model, int chunks, bool recompute, nn::Model::LayerHooks* hooks, Device& device);
  ~ChunkRunner();
  ChunkRunner(const ChunkRunner&) = delete;
  ChunkRunner& operator=(const ChunkRunner&) = delete;

  // y = the chunk's layers on x; what backward needs is kept under `key`.
  Tensor forward(const LayerRange& range, int chunk, int key, const Tensor& x);
  // d(input) from d(output), releasing what was kept under `key`; undefined when the chunk takes tokens.
  Tensor backward(const LayerRange& range, int chunk, int key, const Tensor& dy);
  // Keys whose backward has not run yet.
  size_t held() const { return held_.size(); }

 private:
  struct Effect;
  struct Memo;
  struct Held;
  template <class Call>
  static Tensor measure(device::CountingDevice& d, Effect& e, Call&& call);

  nn::Model& model_;
  bool recompute_;
  nn::Model::LayerHooks* hooks_;
  Device& device_;
  std::vector<std::unique_ptr<Memo>> memo_;  // by chunk; only on a counting device
  std::map<int, std::unique_ptr<Held>> held_;
};

}  // namespace tandem::parallel::pipeline
