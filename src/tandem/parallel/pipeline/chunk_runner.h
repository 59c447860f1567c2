// ChunkRunner: one chunk's forward or backward for one micro-batch, and what each forward keeps for its backward,
// by key. The executor owns the order of the actions; the runner owns their state.
// Forward runs under the activations purpose, backward under transients (what the accounts call them).
// On a counting device (the planner's) the runner first probes each chunk: forward then backward on the chunk's
// first input, for real, until two rounds have the same effect (the same bytes by purpose at each call's highest
// point and at its end, the same work, the same output), with the device's peak suspended. When a replay can
// reproduce those effects, every call of the chunk in the step is replayed on the device's accounts without
// running the layers: a step of hundreds of micro-batches costs the planner a few of them, and what it accounts is
// still the engine's own behaviour. Otherwise the chunk runs for real, as every chunk does when the layer hooks say
// their calls are not all alike (LayerHooks::replayable: the offloaded store, whose hooks count micro-batches and
// work on host memory the probe does not see).
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
  // `host` (null: none): with `recompute`, the kept layer inputs wait in host memory (nn/host_checkpoints.h); the
  // chunks then always run, on a counting device too: a replay would not make the host's buffers and copies.
  ChunkRunner(nn::Model& model, int chunks, bool recompute, nn::Model::LayerHooks* hooks, Device& device,
              nn::HostCheckpoints* host = nullptr);
  ~ChunkRunner();
  ChunkRunner(const ChunkRunner&) = delete;
  ChunkRunner& operator=(const ChunkRunner&) = delete;

  // y = the chunk's layers on x (undefined when its head computes the loss: Model::forward_range); what backward
  // needs is kept under `key`. `batch`: the micro-batch's (nn/batch.h), the same object for its forward and backward.
  Tensor forward(const LayerRange& range, int chunk, int key, const Tensor& x, const nn::Batch& batch);
  // d(input) from d(output), releasing what was kept under `key`; undefined when the chunk takes tokens.
  Tensor backward(const LayerRange& range, int chunk, int key, const Tensor& dy, const nn::Batch& batch);
  // y = the chunk's layers on x, keeping nothing (evaluation): what the layers save is dropped as the call returns.
  Tensor forward_only(const LayerRange& range, const Tensor& x, const nn::Batch& batch);
  // Keys whose backward has not run yet.
  size_t held() const { return held_.size(); }

 private:
  struct Effect;
  struct Memo;
  struct Held;
  template <class Call>
  static Tensor measure(device::CountingDevice& d, Effect& e, Call&& call);
  void probe(device::CountingDevice& d, Memo& m, const LayerRange& range, const Tensor& x, const nn::Batch& batch);
  Tensor measure_forward(device::CountingDevice& d, Effect& e, const LayerRange& range, const Tensor& x, Held& h,
                         const nn::Batch& batch);
  Tensor measure_backward(device::CountingDevice& d, Effect& e, const LayerRange& range, const Tensor& dy, Held& h,
                          const nn::Batch& batch);
  static bool replayable_forward(device::CountingDevice& d, Effect& f, const Tensor& x, const Tensor& y, const Held& h);
  static bool fits(const Effect& f, const Effect& b);
  static int64_t ghost_lowering(const Effect& f, const device::Breakdown& lower, size_t purpose, bool& release_input);

  nn::Model& model_;
  bool recompute_;
  nn::Model::LayerHooks* hooks_;
  nn::HostCheckpoints* host_;
  Device& device_;
  std::vector<std::unique_ptr<Memo>> memo_;  // by chunk; only on a counting device
  std::map<int, std::unique_ptr<Held>> held_;
};

}  // namespace tandem::parallel::pipeline
