// ParameterStore: where the parameters, gradients and optimizer state of the layers this rank holds live, and what
// happens to them in a step, under ZeRO stage 0-3 across the data-parallel group (the same pipeline stage and tp slot
// in every virtual GPU); under expert parallelism an expert slot's experts are units of their own, sharded alike over
// the ranks that hold the same experts (the edp group, layout/groups.h), each unit taking its group's ZeroSharding.
// Each layer is a unit (unit.h) with its own flat buffers of P_u elements, padded to a multiple of dp and cut into dp
// equal shards; rank d owns shard d. Its parts, one job each: UnitBuilder (unit_builder.h) makes the units, places them
// and draws their initial values; ZeroSharding (zero_sharding.h) is the stage, what the rank owns, gathers and reduces;
// OffloadUpdater (offload_updater.h) the host's side of offload; SwapFiles (swap_files.h) the swap files; a
// StepObserver (step_observer.h) is told of each step and hook. Mixed precision: the values layers read are in the
// compute dtype (f32, bf16 or f16); the optimizer updates fp32 master values (the same memory as the values when
// computing in fp32, a separate fp32 copy of the owned part otherwise); gradients are accumulated and reduced in fp32.
// Frozen parameters (nn::Parameter::trainable false: the base model under LoRA): a layer's frozen parameters form a
// unit of their own that holds only compute-dtype values (the whole buffer at stages 0-2, the owned shard at stage 3,
// gathered around forward and backward as any unit's): no gradients, no fp32 master, no optimizer segments, so the
// optimizer, the gradient norm and the checkpoints never see them. write_frozen fills them from outside.
// Tied parameters (nn::Parameter::replica): each is a unit of its own; on a rank that holds both of its uses
// (embedding and head) they share that unit; on two pipeline stages each keeps a copy, sharded alike, and
// tie_gradients() sums the two gradients over the tied group so both copies take the same update.
// Offload (DeepSpeed's offload_optimizer / offload_param, docs/offload.md): an offloaded unit keeps its fp32 master,
// both moments and its owned gradient shard in host memory, and its full gradient exists on the device only during
// its backward. Its gradients add up in the order of the stage without offload, so the bits are the same: at stages
// 2-3 each micro-batch's reduced shard is copied down and added to the host shard; at stages 0-1 the full gradient
// summed so far goes down after each micro-batch and back up under the next one's backward, which adds into it, and
// after the last the sum is reduced and its owned shard copied down. AdamW runs on the host, in the same fp32
// formula, and the updated owned shard goes back up in the compute dtype (then is gathered as the stage does). With
// offload_param the owned compute-dtype shard stays on the host too, uploaded just before each gather. A tied
// parameter split over two stages stays on the device (its gradients are summed there).
// The host's update runs on a thread of its own, unit by unit, beside the device's work: without gradient clipping or
// fp16 each unit's update starts in the backward as soon as its gradient of the step is whole on the host (so in
// backward order); otherwise all of them start once the step's gradient norm is known, in layer order, beside the next
// step's forward. A unit is used only once its update is done and its values are back (the same bits as a synchronous
// update, any timing).
// It is the model's LayerHooks: the pipeline executor calls it around every layer.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/device/accounted_device.h"
#include "tandem/nn/model.h"
#include "tandem/optim/adamw.h"
#include "tandem/parallel/zero/offload_updater.h"
#include "tandem/parallel/zero/step_observer.h"
#include "tandem/parallel/zero/swap_files.h"
#include "tandem/parallel/zero/unit.h"
#include "tandem/parallel/zero/unit_builder.h"
#include "tandem/parallel/zero/zero_sharding.h"

namespace tandem::parallel {

class ParameterStore final : public nn::Model::LayerHooks {
 public:
  // `layers`: the model layers this rank holds, in order. Initialises every parameter from the seed
  // (each rank draws only what it keeps, so the values equal the single-device run's).
  // `tied`: the group of the first and last pipeline stages (layout::Groups::tied), needed when a tied parameter's
  // uses sit on both. `experts`: with expert parallelism, the ranks holding this rank's experts (layout::Groups::edp).
  ParameterStore(nn::Model& model, std::vector<size_t> layers, int zero_stage, comm::Communicator& dp, Device& device,
                 uint64_t seed, const spec::OptimizerConfig& adamw, DType compute = DType::F32,
                 comm::Communicator* tied = nullptr, const OffloadOptions& offload = {},
                 comm::Communicator* experts = nullptr);
  ~ParameterStore() override;

  int zero_stage() const { return zero_.stage(); }
  // The rank among the ranks that hold the same values of `p` (the dp group, or an expert's edp group); 0 on the first.
  int replica_rank(const nn::Parameter& p) const { return unit_of(p).zero->rank(); }
  // Whether the optimizer state of `p` this rank updates is its alone to save: its owned shard at stages 1-3; at stage
  // 0, where every rank of the group holds it whole, on the group's first rank only.
  bool saves_state(const nn::Parameter& p) const { return unit_of(p).zero->counts_gradients(); }
  DType compute_dtype() const { return compute_; }
  // Whether any unit's optimizer state lives in host memory (or a swap file).
  bool offloaded() const { return offloaded_units_ > 0; }
  // The bytes of the rank's swap file (offload to nvme); 0 without one. The planner reads it as the disk's share.
  uint64_t swap_bytes() const { return swap_.state_bytes() + swap_.values_bytes(); }
  uint64_t optimizer_swap_bytes() const { return swap_.state_bytes(); }   // offload_optimizer's file
  uint64_t parameter_swap_bytes() const { return swap_.values_bytes(); }  // offload_param's file

  // The offloaded units' update started during the backward: each unit's as soon as its gradient of the step is
  // whole on the host, while the backward goes on through the layers below it. Allowed when the update needs nothing
  // of the whole step: no gradient clipping and no fp16 overflow check, so `grad_scale` is known before the step.
  struct UpdateInBackward {
    float lr = 0, grad_scale = 1;
  };
  // Zeroes gradient accumulators at the start of a step. With `in_backward` (and offloaded units), the optimizer's
  // step is counted here and the offloaded units' update starts in the backward; optimizer_step() must then be given
  // the same lr and grad_scale.
  void begin_step(std::optional<UpdateInBackward> in_backward = std::nullopt);
  // Reduces gradients over dp (stages 0 and 1: all of them; 2 and 3: already done per unit).
  void reduce_gradients();
  // After reduce_gradients: sums the gradients of tied parameters whose two uses sit on two pipeline stages.
  void tie_gradients();
  // Sum of squares of the gradients this rank is responsible for counting: its owned shard (stage >= 1) or,
  // at stage 0, everything on dp rank 0 only; parameters replicated over tp only when `count_replicated`.
  double grad_sum_of_squares(bool count_replicated) const;
  // AdamW on the owned part, then (stage 1 and 2) the updated shards gathered back into the full values. The
  // offloaded units' update may still run when this returns (see finish_update).
  void optimizer_step(float lr, float grad_scale);
  // Waits for the offloaded units' update of the last step (every visit below does; so does the destructor).
  void finish_update();
  // The owned state is being read by device work that `ticket` marks (a checkpoint's copies to host memory, on the
  // device's stream of copies to host memory): the next optimizer_step's updates on `device` wait for it there, not on
  // the host, so the forward and backward before them run beside the copies. Tickets of other devices were copied at
  // once.
  void update_after(Device& device, uint64_t ticket);

  // Who is told of each step, its hooks, its gradients' copies down and the updates it queues (the offload timeline's
  // recorder); null: no one. It must outlive the store.
  void observe(StepObserver* observer) { observer_ = observer; }
  optim::AdamW& optimizer() { return *adamw_; }

  // Every piece of optimizer state this rank updates: the parameter, where the piece starts in it (its
  // flattened tp slot), and its fp32 values and AdamW moments, (n) each. Writable: checkpoints load through it.
  void visit_owned(const std::function<void(const nn::Parameter&, int64_t offset, const Tensor& value,
                                            const Tensor& exp_avg, const Tensor& exp_avg_sq)>& fn);
  // After the owned values were written from outside (a checkpoint): refresh the full values from them.
  void values_changed();

  // Writes frozen parameters' values from outside (pretrained weights). Collective over dp. For every piece of a
  // frozen parameter this rank keeps (everything at stage 0, its shard of each frozen unit at stages 1-3), `fill`
  // writes `count` fp32 values of elements [offset, offset + count) of the parameter's tp slot into `values`; the store
  // rounds them to the compute dtype and then, at stages 1 and 2, gathers the shards into the full values.
  void write_frozen(
      const std::function<void(const nn::Parameter&, int64_t offset, int64_t count, float* values)>& fill);

  // The values of every parameter of these layers, as they would be on one device's tp slot: for tests,
  // export and checkpoints of small models. Collective over dp at stage 3.
  void visit_full_values(const std::function<void(const nn::Parameter&, const Tensor&)>& fn);

  void before_forward(size_t layer) override;
  void after_forward(size_t layer) override;
  void before_backward(size_t layer) override;
  void after_backward(size_t layer) override;

 private:
  // A reduced gradient shard on its way down to the host: kept alive until the copy is done (at the next unit's
  // backward, or at the step's end), then summed into the unit's host shard when it is not the step's first.
  struct GradientDownload {
    Unit* unit = nullptr;
    Tensor source;   // fp32 on the device: the reduced shard (shard), or at stages 0-1 the full sum (shard * dp)
    Tensor staging;  // (shard) fp32 on the host, added into owned_grads once it arrived; undefined when the copy went
                     // straight to its place (owned_grads or full_grads_host)
    uint64_t ticket = 0;
    bool last = false;  // the unit's last of the step: once it is done, its gradient of the step is whole
  };

  const std::vector<int>& units_of(size_t layer) const;
  const Unit& unit_of(const nn::Parameter& p) const;
  // A transient unit's full values gathered (zero_sharding.h), this rank's shard taken from where the unit keeps it.
  void gather_values(Unit& u);
  // The owned compute-dtype values from the fp32 master (stages 0-2), then the shards gathered (1, 2); with
  // `offloaded_too`, the offloaded units' values uploaded from their host master as well.
  void refresh_values(bool offloaded_too = true);
  // Offloaded units (offload_gradients.cc). Before the device reads an offloaded unit's values: its upload waited for,
  // and at stages 1-2 the owned shards gathered into the full values again.
  void make_current(Unit& u);
  // Before any use of a unit's full values on the device: gathered when transient, made current when offloaded.
  void use_values(Unit& u);
  // Before and after an offloaded unit's backward: its device gradient buffer (at stages 0-1 filled with the sum so
  // far), then what the step needs of it copied down; the previous download finished first, and when it was its
  // unit's last of the step with the update in the backward, that unit's update queued.
  void prepare_gradient(Unit& u);
  void download_gradient(Unit& u);
  void finish_download();
  // Submits the unit's update of this step to the updater (once a step).
  void queue_update(Unit& u, float lr, float grad_scale);
  // At optimizer_step: every offloaded unit not yet queued this step is, in layer order (a unit no backward reached
  // has a zero gradient).
  void start_update(float lr, float grad_scale);
  // Before an offloaded unit is used: its queued updates done (rethrows what failed on the update's thread).
  void wait_updated(const Unit& u) { updater_->wait(u); }
  // The unit's owned compute-dtype values on the host, for a gather: owned_values_host, or with the parameters swapped
  // the gathers' buffer, read in from the parameters' swap file.
  Tensor host_values_for_gather(const Unit& u) {
    return u.owned_values == Where::SwapFile ? swap_.values(u, true, false) : u.owned_values_host;
  }
  // The device memory offloaded state is accounted on: the host's.
  Device& host() const { return *host_; }

  nn::Model& model_;
  DType compute_;
  ZeroSharding zero_;  // the units' stage over the dp group: what this rank owns, gathers and reduces
  std::unique_ptr<ZeroSharding> expert_zero_;  // the expert units' over the edp group; null without expert parallelism
  comm::Communicator* tied_;
  Device& device_;
  device::AccountedDevice* host_ = nullptr;  // with offload: host memory
  bool param_offload_ = false;               // offload_param: the owned compute-dtype values live on the host
  int offloaded_units_ = 0;
  int micro_batches_ = 1;
  SwapFiles swap_;                      // nvme: the files the swapped units' state and values live in
  std::vector<int64_t> segment_start_;  // by segment: where it starts in its unit's owned master
  int64_t upload_piece_;                // offload_optimizer.upload_piece
  // The step's update in the backward when there is one (begin_step).
  std::optional<UpdateInBackward> in_backward_;
  uint64_t state_read_ = 0;  // update_after's ticket, until the next update waits for it
  std::optional<GradientDownload> download_;
  StepObserver* observer_ = nullptr;  // observe()
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<std::vector<int>> units_of_layer_;  // indices into units_; empty for layers without parameters
  std::unordered_map<const nn::Parameter*, const Unit*> unit_of_param_;  // each held parameter's (aliases too)
  std::vector<bool> held_;                                               // by layer: on this rank
  std::vector<nn::Parameter*> segment_param_;                            // the parameter of each optimizer segment
  std::unique_ptr<optim::AdamW> adamw_;
  // The offloaded units' host update and uploads; after what it reads, so that it stops first.
  std::unique_ptr<OffloadUpdater> updater_;
};

}  // namespace tandem::parallel
