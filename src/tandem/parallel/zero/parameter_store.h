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
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/device/accounted_device.h"
#include "tandem/nn/model.h"
#include "tandem/optim/adamw.h"
#include "tandem/parallel/zero/offload_updater.h"
#include "tandem/parallel/zero/swap_files.h"
#include "tandem/parallel/zero/timeline.h"
#include "tandem/parallel/zero/timeline_recorder.h"
#include "tandem/parallel/zero/unit.h"

namespace tandem::parallel {

// offload_optimizer.ratio's rule, in one place for the store and the planner: in a rank's layer order, a unit is
// offloaded once the parameters up to and including it are more than 1 - ratio of the rank's (`held`), so the first
// layers stay on the device (their gradients come last in the backward: their update is the one nothing after it
// hides) and at least `ratio` of the parameters go to the host.
bool ratio_offloads(int64_t seen_through_unit, int64_t held, double ratio);
// The ratio under which that rule keeps exactly the first `kept` (>= 1) of layers holding `layer_params` on the device:
// four digits where they do, or 1 when nothing would be left to offload.
double ratio_keeping_first(const std::vector<int64_t>& layer_params, size_t kept);

// What the store offloads, and where to.
struct OffloadOptions {
  spec::OffloadConfig optimizer;            // offload_optimizer
  spec::OffloadConfig param;                // offload_param
  device::AccountedDevice* host = nullptr;  // the host memory offloaded state lives in (needed when either is on)
  int micro_batches = 1;                    // per step: each unit's backward runs this many times
};

class ParameterStore final : public nn::Model::LayerHooks {
 public:
  // `layers`: the model layers this rank holds, in order. Initialises every parameter from the seed
  // (each rank draws only what it keeps, so the values equal the single-device run's).
  // `tied`: the group of the first and last pipeline stages (layout::Groups::tied), needed when a tied parameter's
  // uses sit on both.
  ParameterStore(nn::Model& model, std::vector<size_t> layers, int zero_stage, comm::Communicator& dp, Device& device,
                 uint64_t seed, const spec::OptimizerConfig& adamw, DType compute = DType::F32,
                 comm::Communicator* tied = nullptr, const OffloadOptions& offload = {});
  ~ParameterStore() override;

  int zero_stage() const { return stage_; }
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

  // The offload timeline (timeline.h) of the next step: its backward, the copies down and up, the host AdamW, and the
  // step after's forward beside them. take_timeline() gives it once the step after has run (null before), or with
  // `at_end` once the recorded step has (the run ends there).
  void record_timeline() { timeline_.arm(); }
  // Where the checkpointed layer inputs' copies are recorded (with parallel.cpu_checkpointing).
  nn::HostCheckpoints::CopyTimeline& checkpoint_timeline() { return timeline_; }
  std::unique_ptr<Timeline> take_timeline(bool at_end = false);
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

  // Builds the unit of `params` (used by `layer`), its buffers and its optimizer segments; returns its index.
  // `offload`: its optimizer state goes to host memory; `uses`: the layers of this rank that use it (2 for a tied
  // parameter both of whose uses it holds).
  int add_unit(size_t layer, std::vector<nn::Parameter*> params, std::string label, uint64_t seed, bool offload,
               int uses, std::vector<optim::Segment>& segments);
  // A frozen unit's compute-dtype values, initialised from the seed (add_unit's part for frozen parameters).
  void add_frozen_values(Unit& u, uint64_t seed);
  // dst (elements [first, first + numel) of p's initial values; any float dtype, on the device or in host memory) =
  // those values, drawn on the device (initial_values.cc).
  void draw_initial(const nn::Parameter& p, const Tensor& dst, uint64_t seed, int64_t first);
  // Writes elements [begin, begin + held.numel()) of frozen unit `u`'s flat buffer, held by `held` (compute dtype),
  // from `fill` (as write_frozen's), rounded on the host.
  void fill_frozen(Unit& u, int64_t begin, const Tensor& held,
                   const std::function<void(const nn::Parameter&, int64_t, int64_t, float*)>& fill);
  const std::vector<int>& units_of(size_t layer) const;
  void point_values(Unit& u, const Tensor& full);
  void point_grads(Unit& u, const Tensor& full);
  void gather_values(Unit& u);
  void release_values(Unit& u);
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
  // nvme: the swap files opened and each swapped unit's initial master drawn into the optimizer's.
  void make_swap(const spec::OffloadConfig& optimizer, const spec::OffloadConfig& param, uint64_t seed);
  // The unit's owned compute-dtype values on the host, for a gather: owned_values_host, or with the parameters swapped
  // the gathers' buffer, read in from the parameters' swap file.
  Tensor host_values_for_gather(const Unit& u) {
    return u.owned_values == Where::SwapFile ? swap_.values(u, true, false) : u.owned_values_host;
  }
  bool values_transient() const { return stage_ == 3 || param_offload_; }
  // The device memory offloaded state is accounted on: the host's.
  Device& host() const { return *host_; }

  nn::Model& model_;
  int stage_;
  DType compute_;
  comm::Communicator& dp_;
  comm::Communicator* tied_;
  Device& device_;
  device::AccountedDevice* host_ = nullptr;  // with offload: host memory
  bool param_offload_ = false;               // offload_param: the owned compute-dtype values live on the host
  int offloaded_units_ = 0;
  int micro_batches_ = 1;
  bool swap_optimizer_ = false;         // offload_optimizer to nvme
  bool swap_param_ = false;             // offload_param to nvme
  SwapFiles swap_;                      // nvme: the files the swapped units' state and values live in
  std::vector<int64_t> segment_start_;  // by segment: where it starts in its unit's owned master
  int64_t upload_piece_;                // offload_optimizer.upload_piece
  // The step's update in the backward when there is one (begin_step).
  std::optional<UpdateInBackward> in_backward_;
  uint64_t state_read_ = 0;  // update_after's ticket, until the next update waits for it
  std::optional<GradientDownload> download_;
  TimelineRecorder timeline_;  // the offload timeline, when one is asked for (record_timeline)
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<std::vector<int>> units_of_layer_;  // indices into units_; empty for layers without parameters
  std::vector<bool> held_;                        // by layer: on this rank
  std::vector<nn::Parameter*> segment_param_;     // the parameter of each optimizer segment
  std::unique_ptr<optim::AdamW> adamw_;
  // The offloaded units' host update and uploads; after what it reads, so that it stops first.
  std::unique_ptr<OffloadUpdater> updater_;
};

}  // namespace tandem::parallel
