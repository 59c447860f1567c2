// ParameterStore: where the parameters, gradients and optimizer state of the layers this rank holds live,
// under ZeRO stage 0-3 across the data-parallel group (the same pipeline stage and tp slot in every
// virtual GPU). Each layer is a unit with its own flat buffer of P_u elements, padded to a multiple of dp
// and cut into dp equal shards; rank d owns shard d.
//   stage 0: full values, full gradients (all-reduced at the end of the step), full AdamW state
//   stage 1: full values and gradients; gradients reduce-scattered at the end of the step; AdamW state and
//            the update only for the owned shard, then the shards all-gathered back into the values
//   stage 2: as 1, but a unit's full gradient exists only during its backward: right after it, it is
//            reduce-scattered and added into the owned gradient shard
//   stage 3: as 2, and a unit's full values exist only around its forward and its backward: gathered just
//            before, freed just after; the owned fp32 shard is the master copy
// Mixed precision: the values layers read are in the compute dtype (f32, bf16 or f16); the optimizer
// updates fp32 master values (the same memory as the values when computing in fp32, a separate fp32 copy of
// the owned part otherwise); gradients are accumulated and reduced in fp32.
// Tied parameters (nn::Parameter::replica): each is a unit of its own; on a rank that holds both of its uses
// (embedding and head) they share that unit; on two pipeline stages each keeps a copy, sharded alike, and
// tie_gradients() sums the two gradients over the tied group so both copies take the same update.
// It is the model's LayerHooks: the pipeline executor calls it around every layer.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/nn/model.h"
#include "tandem/optim/adamw.h"

namespace tandem::parallel {

class ParameterStore final : public nn::Model::LayerHooks {
 public:
  // `layers`: the model layers this rank holds, in order. Initialises every parameter from the seed
  // (each rank draws only what it keeps, so the values equal the single-device run's).
  // `tied`: the group of the first and last pipeline stages (layout::Groups::tied), needed when a tied parameter's
  // uses sit on both.
  ParameterStore(nn::Model& model, std::vector<size_t> layers, int zero_stage, comm::Communicator& dp, Device& device,
                 uint64_t seed, const config::OptimizerConfig& adamw, DType compute = DType::F32,
                 comm::Communicator* tied = nullptr);
  ~ParameterStore() override;

  int zero_stage() const { return stage_; }
  DType compute_dtype() const { return compute_; }

  // Zeroes gradient accumulators at the start of a step.
  void begin_step();
  // Reduces gradients over dp (stages 0 and 1: all of them; 2 and 3: already done per unit).
  void reduce_gradients();
  // After reduce_gradients: sums the gradients of tied parameters whose two uses sit on two pipeline stages.
  void tie_gradients();
  // Sum of squares of the gradients this rank is responsible for counting: its owned shard (stage >= 1) or,
  // at stage 0, everything on dp rank 0 only; parameters replicated over tp only when `count_replicated`.
  double grad_sum_of_squares(bool count_replicated) const;
  // AdamW on the owned part, then (stage 1 and 2) the updated shards gathered back into the full values.
  void optimizer_step(float lr, float grad_scale);
  optim::AdamW& optimizer() { return *adamw_; }

  // Every piece of optimizer state this rank updates: the parameter, where the piece starts in it (its
  // flattened tp slot), and its fp32 values and AdamW moments, (n) each. Writable: checkpoints load through it.
  void visit_owned(const std::function<void(const nn::Parameter&, int64_t offset, const Tensor& value,
                                            const Tensor& exp_avg, const Tensor& exp_avg_sq)>& fn);
  // After the owned values were written from outside (a checkpoint): refresh the full values from them.
  void values_changed();

  // The values of every parameter of these layers, as they would be on one device's tp slot: for tests,
  // export and checkpoints of small models. Collective over dp at stage 3.
  void visit_full_values(const std::function<void(const nn::Parameter&, const Tensor&)>& fn);

  void before_forward(size_t layer) override;
  void after_forward(size_t layer) override;
  void before_backward(size_t layer) override;
  void after_backward(size_t layer) override;

 private:
  struct Unit;
  // Builds the unit of `params` (used by `layer`), its buffers and its optimizer segments; returns its index.
  int add_unit(size_t layer, std::vector<nn::Parameter*> params, std::string label, uint64_t seed,
               std::vector<optim::Segment>& segments);
  const std::vector<int>& units_of(size_t layer) const;
  void point_values(Unit& u, const Tensor& full);
  void point_grads(Unit& u, const Tensor& full);
  void gather_values(Unit& u);
  void release_values(Unit& u);
  // The owned compute-dtype values from the fp32 master (stages 0-2), then the shards gathered (1, 2).
  void refresh_values();

  nn::Model& model_;
  int stage_;
  DType compute_;
  comm::Communicator& dp_;
  comm::Communicator* tied_;
  Device& device_;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<std::vector<int>> units_of_layer_;  // indices into units_; empty for layers without parameters
  std::vector<bool> held_;                        // by layer: on this rank
  std::vector<nn::Parameter*> segment_param_;     // the parameter of each optimizer segment
  std::unique_ptr<optim::AdamW> adamw_;
};

}  // namespace tandem::parallel
