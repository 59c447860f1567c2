// PipelineExecutor: runs one rank's action list of a schedule for one step: forward and backward of its
// chunks over the micro-batches, activations and gradients to and from the neighbouring stages (p2p on
// the pp group), the loss on the last stage. With one stage it is plain gradient accumulation.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/device/accounted_device.h"
#include "tandem/nn/model.h"
#include "tandem/parallel/pipeline/chunk_runner.h"
#include "tandem/parallel/pipeline/partition.h"
#include "tandem/parallel/pipeline/schedule.h"

namespace tandem::parallel::pipeline {

struct MicroBatch {
  Tensor inputs;            // the model's input: (B, T) i32 tokens or (B, F) f32 features (T: this context shard's)
  Tensor targets;           // (B*T) or (B) i32
  Tensor documents;         // (B, T) i32 each position's document (data.document_mask), or undefined
  nn::SamplePlace samples;  // where its samples sit in the run (the engine's), for the layers' draws
  // A mixture-of-experts model's balance sums for this micro-batch (the engine's), or null.
  std::shared_ptr<const nn::MoeBalance> balance;
};

struct ExecutorSetup {
  int pp_rank = 0, pp = 1, virtual_stages = 1, micro_batches = 1;
  std::vector<LayerRange> chunks;       // this rank's chunks, by chunk index (global stage c * pp + pp_rank)
  std::vector<Action> actions;          // this rank's schedule
  Shape input_shape;                    // one micro-batch's model input
  DType activation_dtype = DType::F32;  // what flows between stages (the compute dtype)
  bool recompute = false;               // activation checkpointing per layer
  // With recompute: the host memory the kept layer inputs wait in (parallel.cpu_checkpointing); null: the device.
  Device* checkpoint_host = nullptr;
  int64_t checkpoint_host_layers = -1;  // of each chunk, the first layers whose inputs go there; -1: all that can
  bool keep_attention = false;          // with recompute: attention's output kept for the second forward (nn::Batch)
  nn::Tiles tiles;                      // the tokens the loss and the MLPs take at once, handed with each batch
  nn::ContextSplit context;             // this rank's shard of the sequences, handed with each batch
  // A mixture of experts' balance sums when its loss reads them (nn::MoeBalance::sums, 2E f32 elements; 0: none). They
  // travel with each micro-batch: forward, a stage sends its running sums with its activation and the next copies them
  // into its own before its layers add to them; backward, the totals go back with the gradient, each stage copying
  // them in before its routers' backward. Stages without MoE layers pass them on.
  int64_t balance_sums = 0;
};

// Watches the actions an executor runs: before(action, live) as each starts, after(action) as it ends (before the
// executor lets go of a micro-batch it is done with). `live`: the micro-batches whose activations the rank holds
// during the action, a forward's own counted. The executor calls its observers in the order they were added.
class ActionObserver {
 public:
  virtual ~ActionObserver() = default;
  virtual void before(const Action& action, int live_micro_batches) {}
  virtual void after(const Action& action) {}
};

// Labels an accounted device with the action it runs ("backward of micro-batch 3 (chunk 0)": the chunk with virtual
// stages) and the micro-batches held then, so that its peak says when it came: the run's report of its peak
// (train/trainer.cc) and the planner's prediction (plan/memory_model.cc) both install it.
class ActionLabels final : public ActionObserver {
 public:
  ActionLabels(device::AccountedDevice& device, int virtual_stages)
      : device_(device), virtual_stages_(virtual_stages) {}
  void before(const Action& action, int live_micro_batches) override;

 private:
  device::AccountedDevice& device_;
  int virtual_stages_;
};

class PipelineExecutor {
 public:
  PipelineExecutor(nn::Model& model, ExecutorSetup setup, comm::Communicator& pp, nn::Model::LayerHooks* hooks,
                   Device& device);

  // Runs the step. `batch(mb)` makes micro-batch mb, once on each rank: at its first action there, kept until its
  // last (the first stage reads its inputs, every attention its documents, the last stage its targets); each layer
  // gets it as an nn::Batch.
  // The loss (last stage only): a model that computes it (Model::computes_loss) adds it into `sink` from its head;
  // for any other, `loss(logits, targets)` accumulates it and overwrites the logits with their gradient.
  // Allocations are accounted as pipeline buffers (receives), activations (forward), transients (backward, the
  // loss) and other (the batch).
  // `forward_only` (evaluation): the schedule's forward actions alone, in its order, keeping no activations; the loss
  // is still computed for every micro-batch, and its gradient dropped.
  void run(const std::function<MicroBatch(int)>& batch, const nn::LossSink& sink,
           const std::function<void(const Tensor& logits, const Tensor& targets)>& loss, bool forward_only = false);

  // Adds an observer of the actions (ActionObserver), kept as long as the executor; returns it.
  template <class Observer>
  Observer& observe(std::unique_ptr<Observer> observer) {
    TANDEM_CHECK(observer, "pipeline executor: no observer");
    Observer& o = *observer;
    observers_.push_back(std::move(observer));
    return o;
  }
  // The chunks' calls go to the runner, which runs the layers, until set_chunk_calls() puts other calls in its place
  // (which may call the runner in turn: the planner's replay, plan/chunk_replay.h). Before run() only.
  ChunkRunner& chunk_runner() { return *runner_; }
  void set_chunk_calls(std::unique_ptr<ChunkCalls> calls);
  int virtual_stages() const { return s_.virtual_stages; }
  // With setup.checkpoint_host: where the checkpointed inputs wait (to show their copies in a timeline); else null.
  nn::HostCheckpoints* host_checkpoints() { return host_checkpoints_.get(); }

 private:
  int stage_of(int chunk) const { return global_stage(s_.pp_rank, chunk, s_.pp); }
  int key(int mb, int chunk) const { return mb * s_.virtual_stages + chunk; }
  // `sums`: the message of the balance sums that goes with the activation or gradient, on the same channel.
  int tag(int kind, int receiver_stage, int mb, bool sums = false) const;

  nn::Model& model_;
  ExecutorSetup s_;
  comm::Communicator& pp_;
  nn::Model::LayerHooks* hooks_;
  Device& device_;
  int total_stages_;
  std::vector<Shape> in_shapes_, out_shapes_;              // per chunk
  std::unique_ptr<nn::HostCheckpoints> host_checkpoints_;  // with setup.checkpoint_host: its buffers, kept all run
  std::unique_ptr<ChunkRunner> runner_;
  std::unique_ptr<ChunkCalls> replacement_;  // set_chunk_calls's; null: none
  ChunkCalls* chunk_calls_ = nullptr;        // where the chunks' calls go: replacement_, else runner_
  std::vector<std::unique_ptr<ActionObserver>> observers_;
};

}  // namespace tandem::parallel::pipeline
