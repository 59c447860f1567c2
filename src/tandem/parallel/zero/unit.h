// Internal to ParameterStore and its parts (zero/): one ZeRO unit, the flat buffers of one layer's
// parameters (or of one tied parameter) and where each lives. Not a public type: nothing outside zero/ sees it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/nn/layer.h"

namespace tandem::parallel {

struct Unit {
  std::vector<nn::Parameter*> params;
  std::vector<int64_t> offsets;  // of each parameter in the unit's flat buffer
  int64_t numel = 0;             // P_u
  int64_t shard = 0;             // ceil(P_u / dp): the padded buffer is shard * dp
  Tensor values;      // (shard * dp) compute dtype, what layers read; only around forward/backward when transient
  Tensor grads;       // (shard * dp) fp32 gradients; only during backward at stages 2 and 3 and when offloaded
  Tensor master;      // fp32 values the optimizer updates: (shard * dp) at stage 0, (shard) owned at 1-3; the
                      // same memory as `values` (or its owned slice) when computing in fp32 at stages 0-2 on the
                      // device; in host memory when offloaded
  Tensor grad_shard;  // (shard) owned, reduced fp32 gradients (stages 1-3; in host memory when offloaded)
  std::string label;  // "layer 3 (blocks.2)" for allocation names
  // Tied parameters (nn::Parameter::replica): such a unit holds one tied parameter. `aliases` are the other uses
  // of it on this rank, pointed at the same memory; `tied_remote`: the other use sits on another pipeline stage,
  // which keeps a copy, and the two gradients are summed every step over the tied group.
  std::vector<nn::Parameter*> aliases;
  bool tied_remote = false;
  // Frozen parameters (nn::Parameter::trainable false): only `values` (stages 0-2) or `frozen_shard` (stage 3).
  bool frozen = false;
  Tensor frozen_shard;  // (shard) compute dtype: the owned values of a frozen unit at stage 3
  // The optimizer segments of this unit: [first_segment, end_segment) of the store's AdamW.
  size_t first_segment = 0, end_segment = 0;

  // Offload (offload_optimizer): master, grad_shard and the moments live in host memory; the update runs on the host
  // and the updated compute-dtype shard travels back.
  bool offloaded = false;
  Tensor host_values;  // (shard) compute dtype on the host: the updated owned values to upload (`master` itself when
                       // computing in fp32); undefined when staged
  // offload_optimizer alone with values apart from the master (16-bit compute, or the master swapped): the device
  // keeps the values, so the host keeps no copy; the update casts them into one of the store's two upload buffers.
  bool values_staged = false;
  size_t upload_buffer = 0;  // a staged unit's last upload: which buffer it left from
  Tensor values_shard;       // (shard) compute dtype, the owned values gathers start from when the full values are
                             // transient (stage 3, offload_param): on the device, or `host_values` with offload_param
  Tensor host_grads;         // (shard * dp) fp32 on the host at stages 0-1: the full gradient summed over the step's
                      // micro-batches so far, uploaded under the next one's backward so that the device adds into
                      // it as the resident buffer of an unoffloaded unit does (the same bits); `grad_shard` is
                      // its owned slice, where the last micro-batch's reduced sum lands
  int uses = 1;         // layers of this rank that use it: 2 for a tied parameter both of whose uses it holds
  int arrived = 0;      // backward passes of this unit this step (uses of each micro-batch so far)
  bool queued = false;  // its update of this step is submitted to the OffloadUpdater (or done)
  uint64_t upload = 0;  // ticket of the last upload of host_values to the device
  bool stale = false;   // the device's full values predate the last update: gather the owned shard again
  // nvme: the master and both moments live in the rank's swap file, not in host memory (`master` undefined), each
  // part at an aligned offset of the unit's region: master at swap_offset, exp_avg one part later, exp_avg_sq two.
  bool swapped = false;
  uint64_t swap_offset = 0;
  uint64_t swap_part = 0;  // bytes of one part: (shard) fp32, rounded up for direct I/O
  // offload_param to nvme: the owned compute-dtype values live in the parameters' swap file (`host_values`
  // undefined), read into a host buffer before each gather and written after each update.
  bool values_swapped = false;
  uint64_t values_offset = 0;
  uint64_t values_bytes = 0;  // (shard) in the compute dtype, rounded up for direct I/O
};

}  // namespace tandem::parallel
