// The checks a run makes before it allocates anything or takes step 1, for what would otherwise fail hours in: the
// options against the config, the run folder and the checkpoint to resume from, the data's token ids, the disk
// space for the checkpoints. A refusal that depends on one rank's view is agreed by every rank, so all stop or none.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/config/config.h"
#include "tandem/data/dataset.h"
#include "tandem/layout/groups.h"
#include "tandem/train/checkpoint_writer.h"
#include "tandem/train/run_lock.h"
#include "tandem/train/train_options.h"

namespace tandem::train {

class RunChecks {
 public:
  // `print`: this rank prints (rank 0 of a run that prints).
  RunChecks(const config::TrainConfig& cfg, const TrainOptions& options, layout::Groups& groups, bool print);

  // The options against each other and the config: --resume with --init, --init with LoRA, document masks on the
  // CUDA backend (its flash kernels' dtypes and head dims).
  void options() const;
  // The run folder first (rank 0 takes its lock into `lock`, unless the caller or `lock` holds it, and looks), then
  // the checkpoint (empty: none) against the run's steps; returns the step to start from (the checkpoint's, or 0).
  int64_t start(const std::string& checkpoint, RunFolderLock& lock) const;
  // The token ids of `dataset` against the vocabulary, each rank its part; `what` names it ("data", "eval data").
  void data(const data::Dataset& dataset, const char* what) const;
  // The free space where `writer` puts the checkpoints against what this run, from step `start`, holds there at once.
  void disk(CheckpointWriter& writer, int64_t start) const;

 private:
  const config::TrainConfig& cfg_;
  const TrainOptions& options_;
  layout::Groups& groups_;
  bool print_;
};

}  // namespace tandem::train
