// Engine: one rank's part of a training step in any layout. It builds this rank's slice of the model (its
// pipeline chunks, its tensor-parallel slot), keeps parameters and optimizer state under ZeRO across the
// data-parallel group, runs the pipeline schedule over the micro-batches, reduces gradients, clips and
// updates. With one device every group is the rank itself and it is plain training.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/layout/groups.h"
#include "tandem/layout/layout.h"
#include "tandem/nn/model.h"
#include "tandem/optim/adamw.h"
#include "tandem/parallel/pipeline/executor.h"
#include "tandem/parallel/tensor/context_exchange.h"
#include "tandem/parallel/tensor/expert_exchange.h"
#include "tandem/parallel/tensor/tp_reducer.h"
#include "tandem/parallel/zero/parameter_store.h"
#include "tandem/parallel/zero/timeline_recorder.h"
#include "tandem/spec/train.h"

namespace tandem::parallel {

struct EngineConfig {
  layout::ParallelPlan plan;
  int zero_stage = 0;
  uint64_t seed = 0;
  spec::OptimizerConfig optimizer;
  int64_t micro_batch = 1;                // samples per micro-batch on one virtual GPU
  int64_t micro_batches = 1;              // per step (gradient accumulation steps)
  double gradient_clipping = 0;           // 0: off
  DType compute = DType::F32;             // activations and the weights layers read; master weights stay fp32
  spec::Fp16Config fp16;                  // loss scaling, when enabled (fp16 compute)
  spec::OffloadConfig offload_optimizer;  // zero_optimization.offload_optimizer
  spec::OffloadConfig offload_param;      // zero_optimization.offload_param
  spec::Tiles tiles;                      // the tokens the loss and the MLPs take at once ("tiles")
  OffloadRun offload_run;                 // swap files and the update's thread: the planner and the profile say
};

struct StepResult {
  double loss_sum = 0;    // over the whole global batch, the same on every rank
  double grad_norm = 0;   // global, before clipping (inf or NaN when an fp16 step overflowed)
  bool skipped = false;   // fp16 overflow: no update this step
  double loss_scale = 1;  // the scale used in this step
  // A mixture-of-experts model's balance (moe_metrics.h's MoeMetrics), one device's figures in any layout: the
  // load-balancing loss (unweighted, the mean over micro-batches), the most-chosen expert's choices over the mean
  // expert's summed over the MoE layers, and per layer (their block numbers in moe_layers). moe false: none.
  bool moe = false;
  double moe_balance_loss = 0, moe_max_load = 0;
  std::vector<double> moe_layer_max_load;  // (L)
  std::vector<int> moe_layers;             // (L)
};

class Engine {
 public:
  // `build(tp)`: the whole model (layers are cheap until materialised) for a tensor-parallel slot.
  // `input_shape`: one micro-batch's model input.
  Engine(const std::function<nn::Model(nn::TpSlot)>& build, const EngineConfig& cfg, layout::Groups& groups,
         Device& device, const Shape& input_shape);

  // One step: `batch(first, count)` gives the global samples first .. first+count-1 of this step. `step_index`
  // (0-based) keys the draws layers make per step (LoRA's dropout masks: nn::SamplePlace).
  StepResult step(const std::function<pipeline::MicroBatch(int64_t first, int64_t count)>& batch, float lr,
                  double loss_normalizer, int64_t step_index = 0);

  // The loss of the model as it stands on one global batch, with no update: the step's schedule, forward actions
  // only. Returns the loss summed over the batch's rows (as StepResult::loss_sum; `loss_normalizer` scales only the
  // logits' gradient, which evaluation drops), the same on every rank.
  double evaluate(const std::function<pipeline::MicroBatch(int64_t first, int64_t count)>& batch,
                  double loss_normalizer);

  // Every parameter's full logical tensor, assembled from all ranks' pieces (tp slots, pipeline stages,
  // ZeRO shards) and returned on every rank. Collective over the world; holds the whole model on every
  // rank, so it is for tests and small models.
  std::map<std::string, std::vector<float>> collect_parameters();

  nn::Model& model() { return model_; }
  ParameterStore& store() { return *store_; }
  // The offload timeline (timeline.h) of the next step: its backward, the copies down and up, the host AdamW, and the
  // step after's forward beside them. take_timeline() gives it once the step after has run (null before), or with
  // `at_end` once the recorded step has (the run ends there).
  void record_timeline() { timeline_.arm(); }
  std::unique_ptr<Timeline> take_timeline(bool at_end = false);
  const layout::Layout& layout() const { return groups_.layout; }
  // The host memory offloaded state and checkpointed layer inputs live in (its own live and peak bytes), or null when
  // neither is asked for.
  device::AccountedDevice* host_memory() { return host_.get(); }
  double loss_scale() const { return loss_scale_; }
  // For checkpoints: the loss-scaling state, restored on resume.
  void set_loss_scale_state(double scale, int good_steps, int overflows_left);
  int loss_scale_good_steps() const { return good_steps_; }
  int loss_scale_overflows_left() const { return overflows_left_; }
  // "stage 0: layers 0..6 (wte.weight .. blocks.5)" for every global stage of the pipeline.
  std::string describe_stages() const;
  // This rank's chunks, by chunk index.
  const std::vector<pipeline::LayerRange>& chunks() const { return chunks_; }
  // What runs the schedule: observers of its actions and other chunk calls are installed there (the run's peak
  // labels, the planner's replay and work log).
  pipeline::PipelineExecutor& executor() { return *executor_; }

 private:
  pipeline::MicroBatch micro_batch(const std::function<pipeline::MicroBatch(int64_t, int64_t)>& batch, int mb,
                                   int64_t step_index);
  // The step's balance figures (StepResult::moe_*) from the micro-batches' sums, which it then drops.
  void balance_metrics(StepResult& r);
  // Runs the schedule over one global batch and returns the loss sum; with `forward_only` nothing is kept.
  double run_schedule(const std::function<pipeline::MicroBatch(int64_t, int64_t)>& batch, double loss_normalizer,
                      bool forward_only, int64_t step_index);

  EngineConfig cfg_;
  layout::Groups& groups_;
  Device& device_;
  TimelineRecorder timeline_;                      // observes the store and the host checkpoints; outlives both
  std::unique_ptr<device::AccountedDevice> host_;  // with offload, made before the store that fills it
  std::unique_ptr<CommTpReducer> tp_reducer_;
  std::unique_ptr<CommContextExchange> context_exchange_;  // with context parallelism
  std::unique_ptr<CommExpertExchange> expert_exchange_;    // with expert parallelism
  nn::ContextSplit context_;                               // this rank's shard of each sequence
  nn::Model model_;
  std::vector<pipeline::LayerRange> all_chunks_;  // by global stage
  std::vector<pipeline::LayerRange> chunks_;      // this rank's, by chunk index
  std::unique_ptr<ParameterStore> store_;
  std::unique_ptr<pipeline::PipelineExecutor> executor_;
  std::vector<std::shared_ptr<const nn::MoeBalance>> balances_;  // this step's, by micro-batch, for its metrics
  // Loss scaling state (fp16).
  double loss_scale_ = 1;
  int good_steps_ = 0;
  int overflows_left_ = 0;  // before the scale is halved (hysteresis)
};

}  // namespace tandem::parallel
