// ChunkReplay: the planner's chunk calls (pipeline::ChunkCalls), in front of the executor's ChunkRunner on a counting
// device. Before the first forward of a chunk it probes the chunk: forward then backward on the chunk's first input,
// for real, until two rounds have the same effect (the same bytes by purpose at each call's highest point and at
// its end, the same work, the same output), with the device's peak suspended. When a replay can reproduce those
// effects, every call of the chunk in the step is replayed on the device's accounts without running the layers: a
// step of hundreds of micro-batches costs the planner a few of them, and what it accounts is still the engine's own
// behaviour. Otherwise the runner runs the chunk's calls. The probe labels the device with the layer running
// ("forward of micro-batch 3, at blocks.2 forward"), and a replay passes its highest point under the same label.
//
// It is only for calls that are alike from one micro-batch to the next: not with the offloaded store, whose hooks
// count micro-batches and work on host memory the probe does not see, nor with host checkpoints, whose buffers are
// reused from one micro-batch to the next (the memory model leaves the runner alone then).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "tandem/device/counting_device.h"
#include "tandem/parallel/pipeline/chunk_runner.h"

namespace tandem::plan {

class ChunkReplay final : public parallel::pipeline::ChunkCalls {
 public:
  // `runner`: the executor's; `device`: the counting device it runs on.
  ChunkReplay(parallel::pipeline::ChunkRunner& runner, device::CountingDevice& device);
  ~ChunkReplay() override;
  ChunkReplay(const ChunkReplay&) = delete;
  ChunkReplay& operator=(const ChunkReplay&) = delete;

  using LayerRange = parallel::pipeline::LayerRange;
  Tensor forward(const LayerRange& range, int chunk, int key, const Tensor& x, const nn::Batch& batch) override;
  Tensor backward(const LayerRange& range, int chunk, int key, const Tensor& dy, const nn::Batch& batch) override;
  Tensor forward_only(const LayerRange& range, const Tensor& x, const nn::Batch& batch) override;
  size_t held() const override { return runner_.held() + replayed_.size(); }

 private:
  struct Effect;
  struct Memo;
  struct Ghosts;
  template <class Call>
  Tensor measure(Effect& e, Call&& call);
  void probe(Memo& m, const LayerRange& range, const Tensor& x, const nn::Batch& batch);
  Tensor measure_forward(Effect& e, const LayerRange& range, const Tensor& x, std::vector<nn::Saved>& saved,
                         const nn::Batch& batch);
  Tensor measure_backward(Effect& e, const LayerRange& range, const Tensor& dy, std::vector<nn::Saved>& saved,
                          const nn::Batch& batch);
  bool replayable_forward(Effect& f, const Tensor& x, const Tensor& y, const std::vector<nn::Saved>& saved) const;
  static bool fits(const Effect& f, const Effect& b);
  static int64_t ghost_lowering(const Effect& f, const device::Breakdown& lower, size_t purpose, bool& release_input);

  parallel::pipeline::ChunkRunner& runner_;
  device::CountingDevice& device_;
  std::map<int, std::unique_ptr<Memo>> memo_;        // by chunk
  std::map<int, std::unique_ptr<Ghosts>> replayed_;  // by key: what each replayed forward left for its backward
};

}  // namespace tandem::plan
