// Trainer: the training loop on any layout. Config -> layout -> model -> data -> steps (the Engine does the
// parallel work: pipeline, tensor slots, ZeRO), a progress line, metrics.jsonl and checkpoints.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/core/diagnostics.h"
#include "tandem/data/dataset.h"
#include "tandem/device/cpu_device.h"
#include "tandem/layout/groups.h"
#include "tandem/nn/model.h"
#include "tandem/parallel/engine.h"
#include "tandem/train/checkpoint_writer.h"
#include "tandem/train/monitor.h"
#include "tandem/train/run_lock.h"

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

struct StepMetrics {
  int64_t step = 0;  // 1-based: the number of updates done
  double loss = 0;   // mean over the global batch
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double step_seconds = 0;
  double tokens_per_s = 0;  // tokens (gpt) or samples (mlp) per second, whole job
  uint64_t peak_bytes = 0;  // the largest per-device peak so far
  bool skipped = false;     // fp16 overflow: no update
  double loss_scale = 1;    // fp16: the scale after this step
  bool evaluated = false;   // "eval" ran after this step
  double val_loss = 0;      // then: the mean loss over its batches, after this step's update
  double checkpoint_s = 0;  // seconds the loop was held at this step's boundary by checkpointing (0: none taken)
  bool checkpoint_writing = false;  // a checkpoint was being written in the background during this step
  // A mixture of experts' balance (parallel::StepResult::moe_*), when the step measured it.
  bool moe = false;
  double moe_balance_loss = 0, moe_max_load = 0;
};

// Builds the whole model for one tensor-parallel slot (layers hold only their slot's part).
using ModelBuilder = std::function<nn::Model(nn::TpSlot)>;

class Trainer {
 public:
  // `plan`: cfg.parallel resolved once by the caller (layout::resolve_parallel, or the planner's choice) for the
  // layout of `groups`; `groups`: this rank's communicators, null for a single process. The model must not be
  // materialised.
  Trainer(config::TrainConfig cfg, layout::ParallelPlan plan, ModelBuilder build,
          std::unique_ptr<data::Dataset> dataset, TrainOptions options, layout::Groups* groups = nullptr);
  // A model built in code, for one process or layouts without tensor parallelism.
  Trainer(config::TrainConfig cfg, layout::ParallelPlan plan, nn::Model model, std::unique_ptr<data::Dataset> dataset,
          TrainOptions options, layout::Groups* groups = nullptr);
  // Builds model and dataset from the config's "model" and "data" objects.
  static Trainer from_config(const config::TrainConfig& cfg, const layout::ParallelPlan& plan, TrainOptions options,
                             layout::Groups* groups = nullptr);

  // Trains until cfg.steps; returns the metrics of the steps run by this call (the same on every rank). Refuses,
  // before allocating anything, an out_dir that holds another run (run_folder.h), a checkpoint past cfg.steps
  // and data with invalid token ids.
  std::vector<StepMetrics> run();

  parallel::Engine& engine() { return *engine_; }
  device::AccountedDevice& device() { return *device_; }

 private:
  // The parts of run(), in order. check_start returns the step to start from (the checkpoint's, or 0).
  int64_t check_start(const std::string& checkpoint);
  void check_data();
  void check_dataset(const data::Dataset& dataset, const char* what);
  void setup();
  // Before step 1: the free space where the checkpoints go against what this run can hold there at once.
  void check_disk(int64_t start);
  void restore(const std::string& checkpoint);
  std::vector<StepMetrics> loop(int64_t start);
  void report(int64_t last_step);
  StepMetrics train_step(int64_t step, bool first_of_run);
  // Samples [first, first + count) of `dataset`'s step `step`, on the device the engine runs on.
  parallel::pipeline::MicroBatch micro_batch(const data::Dataset& dataset, int64_t step, int64_t first, int64_t count);
  double evaluate();  // the mean loss over cfg.eval.steps global batches of the eval data
  std::string describe_lora() const;
  std::string describe_fp8() const;  // "  lora: r 8, ..., 1.2M trainable parameters (0.9%) on a frozen base of ..."
  // The offload timeline (diagnostics.timeline_step) once recorded: OUT/timeline_rank<r>.json and a summary line.
  void write_timeline(bool at_end);
  std::vector<MonitorEvent> monitor_events(const StepMetrics& m) const;  // the tags and values of one step
  bool is_printer() const { return options_.print && groups_->rank == 0; }

  config::TrainConfig cfg_;
  ModelBuilder build_;
  std::unique_ptr<data::Dataset> dataset_;
  std::unique_ptr<data::Dataset> eval_dataset_;  // with "eval"
  TrainOptions options_;
  layout::Groups own_groups_;  // when none were given
  layout::Groups* groups_;
  layout::ParallelPlan plan_;
  std::unique_ptr<device::CpuDevice> own_device_;  // when none was given
  device::AccountedDevice* device_ = nullptr;
  device::CpuDevice host_;  // where batches are made before they go to a GPU
  std::unique_ptr<parallel::Engine> engine_;
  int64_t rows_per_sample_;
  RunFolderLock lock_;                        // rank 0, while run() runs, unless the caller holds the folder's lock
  std::unique_ptr<CheckpointWriter> writer_;  // with out_dir
  std::unique_ptr<Monitor> monitor_;          // rank 0, with "tensorboard" or "csv_monitor" enabled
};

}  // namespace tandem::train
