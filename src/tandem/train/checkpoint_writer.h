// Writing checkpoints, in the background as PyTorch DCP's async_save or on the spot. At a checkpoint's step boundary
// every rank copies the optimizer state it owns (ParameterStore::visit_owned: fp32 values, exp_avg, exp_avg_sq) into
// one host buffer laid out as its rank file's data section (reused from one checkpoint to the next, page-locked on a
// GPU), and a background thread writes that file (the header, then the buffer in large writes, checksummed as it
// goes) while training goes on. The collective part never runs on that thread: at a later step boundary, once every
// rank's file is written, the main threads agree on the checksums and rank 0 writes the manifest, renames the folder
// into place and drops the checkpoints past `keep`. Until then the checkpoint is incomplete (no manifest): a kill at
// any moment leaves the previous complete one the newest. With `async` false the file is written at the boundary,
// through a small staging buffer. It owns the writing, not the format's reading (checkpoint.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "tandem/checkpoint/progress.h"
#include "tandem/checkpoint/safetensors.h"
#include "tandem/config/config.h"
#include "tandem/layout/groups.h"
#include "tandem/parallel/engine.h"
#include "tandem/train/host_buffer.h"

namespace tandem::train {

struct CheckpointWriterOptions {
  std::string root;                      // <run>/checkpoints: step_<k>/ go here
  int64_t keep = 3;                      // complete checkpoints kept
  bool async = true;                     // write in the background (checkpoint.async)
  bool print = false;                    // this rank says what it does (rank 0)
  config::Json config;                   // the validated config, saved in each manifest
  checkpoint::ProgressOptions progress;  // the pace of the progress lines (checkpoint/progress.h)
  // Fault injection for the tests (TANDEM_FAULT=rank=R,step=S,kind=kill_in_write): this rank kills itself by SIGKILL
  // halfway through writing its file of the checkpoint of step S. 0: never.
  int64_t kill_in_write_step = 0;
};

class CheckpointWriter {
 public:
  // Lays out this rank's file from the engine's owned state (sizes only: nothing is copied or allocated yet).
  CheckpointWriter(parallel::Engine& engine, layout::Groups& groups, CheckpointWriterOptions options);
  // Waits for a write in flight and leaves it incomplete (no manifest): the previous checkpoint stays the newest.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // This rank's file: header and data.
  uint64_t rank_file_bytes() const { return layout_.file_bytes(); }
  // Host memory the writer holds from its first checkpoint on: the data section in async mode, the staging buffer
  // otherwise.
  uint64_t host_bytes() const;
  // Collective: the bytes of one whole checkpoint (every rank's file and the manifest, which is a few kB plus the
  // config).
  uint64_t checkpoint_bytes();

  // Collective, at the boundary after step `step`: completes the write in flight (waiting for it), then copies this
  // step's state and starts writing it (async), or writes it (not async) and completes it. Returns the seconds the
  // caller was held. Throws Error when a checkpoint could not be written (see complete()).
  double save(int64_t step);
  // Collective, at every step boundary: completes the write in flight when every rank's file is written (one scalar
  // all-reduce while one is in flight, nothing otherwise).
  void poll();
  // Collective: waits for the write in flight and completes it (at the end of a run, and before it stops). Returns
  // the seconds waited.
  double finish();
  bool writing() const { return pending_ != nullptr; }

 private:
  struct Pending;
  void start_write(int64_t step);
  // Collective: the agreement on the files, rank 0's manifest and rename, and the checkpoints past `keep` dropped.
  // A file or manifest that could not be written (rank `first` the lowest that failed) removes the unfinished folder
  // and throws AgreedError naming the newest complete checkpoint.
  void complete();
  [[noreturn]] void fail_write(const Pending& p, int first, const std::string& cause);
  void copy_state(Pending& w);
  config::Json manifest_without_files(int64_t step);

  parallel::Engine& engine_;
  layout::Groups& groups_;
  CheckpointWriterOptions options_;
  checkpoint::SafetensorsLayout layout_;
  std::string piece_table_;         // the "pieces" metadata, the same at every checkpoint
  const Device* device_ = nullptr;  // where the state lives; null when this rank saves nothing
  HostBuffer image_;                // async: the data section, from the first checkpoint on
  HostBuffer staging_;              // not async: what one write of the staged copy holds
  std::unique_ptr<Pending> pending_;
  bool swept_ = false;  // stale step_<k>.tmp folders of a killed job removed
};

// The host bytes a background checkpoint holds on this rank (CheckpointWriter's data section), from the engine's
// owned state alone: what the planner adds to a rank's host memory when checkpoint.async is on. `coord` is the
// rank's place in the layout (which replicas save nothing). Allocates nothing; works on a counting device.
uint64_t async_checkpoint_host_bytes(parallel::Engine& engine, const layout::Coord& coord);

}  // namespace tandem::train
