// ZeroSharding: ZeRO's stages 0-3 over one group of ranks that hold the same parameters: what each rank owns of a
// unit's flat buffer, the all-gathers of values (before a use at stage 3, after an update at 1-2) and the reductions of
// gradients (all-reduce at stage 0, reduce-scatter at 1-3). It moves values and gradients between a unit's buffers
// (unit.h); which buffers a unit has and where they live is the ParameterStore's. The group is a parameter: the store
// shards its units over the dp group, and a unit sharded over another group (an expert's, over ep) takes a
// ZeroSharding of that group.
//   stage 0: every rank holds everything; full gradients all-reduced at the end of the step
//   stage 1: the AdamW state and the update of the owned shard only; gradients reduce-scattered at the end of the
//            step; the updated shards all-gathered back into the full values
//   stage 2: as 1, but a unit's full gradient exists only during its backward, reduce-scattered right after it
//   stage 3: as 2, and a unit's full values exist only around its forward and backward, gathered just before
// Shapes: P_u the unit's elements; n the group's size; `shard` = ceil(P_u / n), the padded buffer (shard * n); rank r
// owns elements [r * shard, (r + 1) * shard), its owned shard.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/parallel/zero/unit.h"

namespace tandem::parallel {

class ZeroSharding {
 public:
  // Collectives started together and waited for together (their transfers queue back to back).
  using Pending = std::vector<std::unique_ptr<comm::Request>>;

  // `stage`: the configured ZeRO stage (with a group of one there is nothing to shard: every stage is stage 0).
  // `values_offloaded` (offload_param): the full values exist only around a use, as at stage 3. `compute`: the
  // values' dtype; `device`: where full values and gradients are made.
  ZeroSharding(int stage, comm::Communicator& group, Device& device, DType compute, bool values_offloaded);

  int stage() const { return stage_; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }

  // What a rank owns.
  int64_t shard_of(int64_t numel) const { return (numel + size() - 1) / size(); }
  int64_t padded(const Unit& u) const { return u.shard * size(); }  // shard * n
  int64_t owned_begin(const Unit& u) const { return rank() * u.shard; }
  // The owned (shard) view of a unit's padded (shard * n) buffer.
  Tensor owned(const Unit& u, const Tensor& full) const { return full.flat_slice(owned_begin(u), u.shard, {u.shard}); }
  // What the optimizer updates (the fp32 master): the whole buffer at stage 0, the owned shard at 1-3.
  int64_t master_begin(const Unit& u) const { return stage_ == 0 ? 0 : owned_begin(u); }
  int64_t master_count(const Unit& u) const { return stage_ == 0 ? padded(u) : u.shard; }
  // The gradient the optimizer reads: the full buffer at stage 0, the owned reduced shard at 1-3.
  const Tensor& update_grads(const Unit& u) const { return stage_ == 0 ? u.full_grads : u.owned_grads; }
  // The full values exist only around a unit's use (stage 3, offload_param); the full gradients only during its
  // backward (stages 2-3).
  bool values_transient() const { return stage_ == 3 || values_offloaded_; }
  bool grads_transient() const { return stage_ >= 2; }
  // Whether this rank counts its gradients in the norm: its owned shard at stages 1-3; at stage 0 every rank holds the
  // same reduced gradients, and rank 0 counts them.
  bool counts_gradients() const { return stage_ > 0 || rank() == 0; }

  // Gathers.
  // A transient unit's full values, into a new buffer: `fill_own` writes this rank's (shard) of it in the compute dtype
  // first, then the shards are gathered; a frozen unit's device shard (owned_values_device) is gathered as it is.
  void gather(Unit& u, const std::function<void(const Tensor& own)>& fill_own);
  // The full values freed (after a transient unit's use).
  void release(Unit& u) const;
  // After a resident unit's fp32 master changed (an update, a checkpoint): its full values from it, cast (stage 0) or
  // the owned shard cast and the shards gathered (1-2, started into `pending`).
  void refresh(Unit& u, Pending& pending);
  // Stages 1-2: the owned shards, current in the full values, gathered into them (an offloaded unit's after its upload,
  // a frozen unit's after it was written): started into `pending` when given, else waited for.
  void regather(Unit& u, Pending* pending = nullptr);

  // Reductions.
  // Stages 2-3 before a unit's backward: its full gradient, zeroed, for the backward to add into.
  void open_gradients(Unit& u);
  // A unit's full gradient reduced over the group, this rank's (shard) of the sum in a new buffer.
  Tensor reduced(const Unit& u);
  // Stages 2-3 after a unit's backward: its full gradient reduced, added into the owned shard, and freed.
  void close_gradients(Unit& u);
  // Stages 0-1 at the step's end: the full gradients of `units` reduced, all-reduced in place at stage 0,
  // reduce-scattered into the owned shard at 1.
  void reduce(const std::vector<Unit*>& units);

 private:
  comm::Communicator& group_;
  int stage_;
  Device& device_;
  DType compute_;
  bool values_offloaded_;
};

}  // namespace tandem::parallel
