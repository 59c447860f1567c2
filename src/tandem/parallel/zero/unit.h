// Internal to ParameterStore and its parts (zero/): one ZeRO unit, the flat buffers of one layer's parameters (or of
// one tied parameter) and where each lives. Not a public type: nothing outside zero/ sees it.
// Shapes: P_u = numel, the unit's parameters end to end; `shard` = ceil(P_u / dp), so the padded flat buffer is
// (shard * dp) and rank d owns elements [d * shard, (d + 1) * shard) of it, its owned shard.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/nn/layer.h"

namespace tandem::parallel {

// Where a part of a unit lives between steps: device memory, host memory (offload to cpu), or a swap file (offload to
// nvme), paged into a host buffer for each use.
enum class Where { Device, Host, SwapFile };

class ZeroSharding;

struct Unit {
  std::vector<nn::Parameter*> params;
  // Its sharding over the ranks that hold the same parameters: the dp group's, or for an expert slot's experts (under
  // expert parallelism) the edp group's. Not owned.
  ZeroSharding* zero = nullptr;
  std::vector<int64_t> offsets;  // of each parameter in the unit's flat buffer
  int64_t numel = 0;             // P_u
  int64_t shard = 0;             // ceil(P_u / dp): the padded buffer is shard * dp (dp: its group's size)
  std::string label;             // "layer 3 (blocks.2)" for allocation names

  // Placements, fixed when the unit is built.
  // The fp32 master and both AdamW moments: on the device; in host memory (offload_optimizer cpu), where the host
  // AdamW updates them; in the optimizer's swap file (offload_optimizer nvme; `master` then undefined), each part at an
  // aligned offset of the unit's region: master at swap_offset, exp_avg one part later, exp_avg_sq two.
  Where state = Where::Device;
  // The owned compute-dtype values between steps, the copy an offloaded unit's update writes: on the device (every unit
  // whose state is there; an offloaded one without offload_param whose host keeps no copy, 16-bit compute or its state
  // swapped: its update stages the new values through the updater's upload buffers); in host memory
  // (`owned_values_host`); in the parameters' swap file (offload_param nvme), read into a host buffer before each
  // gather and written after each update.
  Where owned_values = Where::Device;
  bool offloaded() const { return state != Where::Device; }  // its optimizer runs on the host
  // An offloaded unit whose new values reach the device only through the upload buffers, in pieces.
  bool staged() const { return offloaded() && owned_values == Where::Device; }

  // Buffers (undefined where not listed as held).
  // (shard * dp) compute dtype, device: what layers read. Held throughout at stages 0-2 without offload_param; only
  // around forward and backward when transient (stage 3, offload_param).
  Tensor full_values;
  // (shard * dp) fp32, device: the gradients layers add into. Throughout at stages 0-1 without offload; only during
  // the unit's backward at stages 2-3 and when offloaded.
  Tensor full_grads;
  // fp32, what the optimizer updates: (shard * dp) at stage 0, (shard) owned at 1-3. Where `state` says (undefined in
  // a swap file); the same memory as `full_values` (or its owned slice) when computing in fp32 at stages 0-2 on the
  // device.
  Tensor master;
  // (shard) fp32, the owned reduced gradients (stages 1-3, and any offloaded unit): on the device, or in host memory
  // when offloaded.
  Tensor owned_grads;
  // (shard) compute dtype, device: the owned values gathers start from when the full values are transient: a frozen
  // unit's at stage 3, and an offloaded unit's at stage 3 without offload_param (its uploads land here).
  Tensor owned_values_device;
  // (shard) compute dtype, host: an offloaded unit's owned values when `owned_values` is Host, which its update writes
  // and the device takes from (`master` itself when computing in fp32).
  Tensor owned_values_host;
  // (shard * dp) fp32, host, at stages 0-1 when offloaded with more than one backward a step: the full gradient summed
  // over the step's micro-batches so far, uploaded under the next one's backward so that the device adds into it as
  // the resident buffer of an unoffloaded unit does (the same bits); `owned_grads` is its owned slice, where the last
  // micro-batch's reduced sum lands.
  Tensor full_grads_host;

  // Tied parameters (nn::Parameter::replica): such a unit holds one tied parameter. `aliases` are the other uses
  // of it on this rank, pointed at the same memory; `tied_remote`: the other use sits on another pipeline stage,
  // which keeps a copy, and the two gradients are summed every step over the tied group.
  std::vector<nn::Parameter*> aliases;
  bool tied_remote = false;
  // Frozen parameters (nn::Parameter::trainable false): only `full_values` (stages 0-2) or `owned_values_device`
  // (stage 3), no master, no gradients, no segments.
  bool frozen = false;
  // The optimizer segments of this unit: [first_segment, end_segment) of the store's AdamW.
  size_t first_segment = 0, end_segment = 0;

  // An offloaded unit's step.
  int uses = 1;              // layers of this rank that use it: 2 for a tied parameter both of whose uses it holds
  int arrived = 0;           // backward passes of this unit this step (uses of each micro-batch so far)
  bool queued = false;       // its update of this step is submitted to the OffloadUpdater (or done)
  uint64_t upload = 0;       // ticket of its last upload of owned values to the device
  size_t upload_buffer = 0;  // a staged unit's last upload: which of the updater's buffers it left from
  bool stale = false;        // the device's full values predate the last update: gather the owned shard again
  // Its regions of the swap files (SwapFiles), in bytes.
  uint64_t swap_offset = 0;
  uint64_t swap_part = 0;  // one part of the state's region: (shard) fp32, rounded up for direct I/O
  uint64_t values_offset = 0;
  uint64_t values_bytes = 0;  // the owned values' region: (shard) in the compute dtype, rounded up for direct I/O

  // Each parameter's value (grad), and its aliases', pointed at its place in `full` (shard * dp), or emptied when
  // `full` is undefined.
  void point_values(const Tensor& full) { point(full, &nn::Parameter::value); }
  void point_grads(const Tensor& full) { point(full, &nn::Parameter::grad); }

 private:
  void point(const Tensor& full, Tensor nn::Parameter::*view) {
    for (size_t i = 0; i < params.size(); ++i) {
      nn::Parameter* p = params[i];
      p->*view = full.defined() ? full.flat_slice(offsets[i], shape_numel(p->shape), p->shape) : Tensor();
    }
    for (nn::Parameter* a : aliases) a->*view = params[0]->*view;
  }
};

}  // namespace tandem::parallel
