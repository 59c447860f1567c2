// What the caller of a Trainer decides beside the config: where the run's files go, where it starts from, the device
// it trains on, whether it prints, and the diagnosis variables the app read.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/core/diagnostics.h"
#include "tandem/device/accounted_device.h"

namespace tandem::train {

struct TrainOptions {
  // metrics.jsonl and checkpoints/ go here; empty: nothing is written. It must not hold another run's files
  // (train/run_folder.h: prepare_run_folder chooses, clears and creates one).
  std::string out_dir;
  std::string resume;  // a checkpoint or run folder to continue from; empty: start fresh
  std::string init;    // a consolidated safetensors file of weights to start from (not with resume)
  bool print = true;   // progress lines on stdout (rank 0 only)
  // The device to train on (a GPU, made before the communicators that use it); null: a CPU device of this
  // process. Its budget is set from "device_memory" when the config has one.
  device::AccountedDevice* device = nullptr;
  // The caller holds out_dir's lock (prepare_run_folder, run_lock.h); otherwise run() takes it on rank 0 for its
  // own duration, refusing a folder another job holds.
  bool out_dir_locked = false;
  // The preflight's predicted peak of the fullest device, written beside the measured one in metrics.jsonl
  // (predicted_peak_bytes); 0: not known (then not written).
  int64_t predicted_peak_bytes = 0;
  // The diagnosis variables the app read (Diagnostics::from_environment): profile, timeline, faults, progress pace.
  Diagnostics diagnostics;
};

}  // namespace tandem::train
