// Trainer: the training loop on any layout. Config -> layout -> model -> data -> steps (the Engine does the
// parallel work: pipeline, tensor slots, ZeRO), a progress line, metrics.jsonl and checkpoints. Its parts hold one
// job each: the checks before step 1 (run_checks.h), the micro-batches (batch_maker.h), the evaluation
// (evaluate.h), the lines printed once (run_description.h), each step's line and monitor events (step_report.h),
// metrics.jsonl (metrics_file.h), the offload timeline (timeline_file.h) and the report at the end (run_report.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/data/dataset.h"
#include "tandem/device/cpu_device.h"
#include "tandem/layout/groups.h"
#include "tandem/nn/model.h"
#include "tandem/parallel/engine.h"
#include "tandem/train/batch_maker.h"
#include "tandem/train/checkpoint_writer.h"
#include "tandem/train/monitor.h"
#include "tandem/train/run_lock.h"
#include "tandem/train/step_metrics.h"
#include "tandem/train/train_options.h"

namespace tandem::train {

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
  // The parts of run() after its checks (run_checks.h), in order.
  void setup();
  void restore(const std::string& checkpoint);
  std::vector<StepMetrics> loop(int64_t start);
  StepMetrics train_step(int64_t step, bool first_of_run);
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
  std::unique_ptr<BatchMaker> batches_;  // on device_, from setup()
  int64_t rows_per_sample_;
  RunFolderLock lock_;                        // rank 0, while run() runs, unless the caller holds the folder's lock
  std::unique_ptr<CheckpointWriter> writer_;  // with out_dir
  std::unique_ptr<Monitor> monitor_;          // rank 0, with "tensorboard" or "csv_monitor" enabled
};

}  // namespace tandem::train
