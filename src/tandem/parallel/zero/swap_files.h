// SwapFiles: offload to nvme, the ParameterStore's state that lives in files rather than in host memory. Two files a
// rank: the optimizer's (offload_optimizer.device nvme), one region a swapped unit with its fp32 master, exp_avg and
// exp_avg_sq as three parts aligned for direct I/O; and the parameters' (offload_param.device nvme), a unit's owned
// compute-dtype values. A unit's state is paged into a host buffer for each use (the host AdamW, a checkpoint's visit)
// and written back; the buffers hold one unit, the largest, so host memory holds one unit's state, not all of it.
// Without files (OffloadRun::swap_files false: the planner's run) nothing is read or written: the planner learns only
// the files' sizes and the buffers' bytes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/checkpoint/swap_file.h"
#include "tandem/core/tensor.h"
#include "tandem/parallel/zero/unit.h"
#include "tandem/spec/train.h"

namespace tandem::parallel {

class SwapFiles {
 public:
  // `host`: where the buffers live (null when nothing is offloaded: then nothing may be placed).
  SwapFiles(Device* host, DType compute) : host_(host), compute_(compute) {}

  // While the units are built, a region for each swapped unit's `owned` elements: its master and moments (sets
  // Unit::swap_offset and swap_part), or its compute-dtype values (Unit::values_offset and values_bytes).
  void place_state(Unit& u, int64_t owned);
  void place_values(Unit& u, int64_t owned);
  uint64_t state_bytes() const { return state_bytes_; }    // the optimizer's file
  uint64_t values_bytes() const { return values_bytes_; }  // the parameters' file

  // Once every unit is placed: the buffers made, and with `files` the files (named for `owner`, "dp rank 1").
  void open(const std::vector<std::unique_ptr<Unit>>& units, bool files, const spec::OffloadConfig& optimizer,
            const spec::OffloadConfig& param, const std::string& owner);
  // A swapped unit's initial state: `draw` writes its master, (owned) fp32, into the buffer (zeroed first); the
  // moments start at zero, as the file's reserved space reads. Only after open() made the optimizer's file.
  bool has_state_file() const { return state_ != nullptr; }
  void write_initial(const Unit& u, const std::function<void(const Tensor& master)>& draw);

  // A swapped unit's master, exp_avg and exp_avg_sq, (owned) fp32 each, read into the shared buffer or with
  // `own_buffer` into one of its own (a caller that keeps the views: a checkpoint's visit).
  std::array<Tensor, 3> read_state(const Unit& u, bool own_buffer = false);
  // Writes all three back; `master`: the first of read_state's views.
  void write_state(const Unit& u, const Tensor& master);
  // A values-swapped unit's owned compute-dtype values, (owned), in a host buffer: the gathers' buffer, or with
  // `updating` the update thread's own; read from the file when `read`.
  Tensor values(const Unit& u, bool read, bool updating);
  // Writes them back (values: values(u, ..., true)'s tensor).
  void write_values(const Unit& u, const Tensor& values);

 private:
  Device* host_;
  DType compute_;
  uint64_t state_bytes_ = 0, values_bytes_ = 0;   // the files' sizes
  std::unique_ptr<checkpoint::SwapFile> state_;   // null without files: nothing is swapped
  std::unique_ptr<checkpoint::SwapFile> values_;  // the same for the parameters' file
  Tensor state_buffer_;                           // one unit's region, aligned for direct I/O, in host memory
  Tensor values_buffer_;         // (largest owned shard) compute dtype, aligned: one unit's owned values for gathers
  Tensor values_update_buffer_;  // the same for the update's thread
};

}  // namespace tandem::parallel
