// The run folder: where one run writes metrics.jsonl and checkpoints/. It owns the rule that a run never
// writes into, deletes from or mixes with another run's files, and that one job at a time uses a folder (its lock,
// run_lock.h); it does not write metrics or checkpoints.
#pragma once

#include <string>

#include "tandem/train/run_lock.h"

namespace tandem::train {

// Refuses (Error naming the folder and what to do) when `out` holds another run's files: a metrics.jsonl or
// anything under checkpoints/, unless `resume_checkpoint` (a checkpoint folder, or empty) is a checkpoint of
// `out` itself and no newer checkpoint follows it there (resuming an older one would branch the run). A run that
// died before its first checkpoint is told apart (nothing to resume: --overwrite). Also refuses a checkpoint of
// another run folder that a job holds now (its checkpoints may be replaced while they are read).
void check_run_folder(const std::string& out, const std::string& resume_checkpoint);

// The folder a run writes, and its lock: the folder is this job's until `lock` goes.
struct RunFolder {
  std::string dir;
  RunFolderLock lock;
};

// Chooses, locks, checks and creates the folder a run writes. `out` as asked (empty: not given);
// `resume_checkpoint` as for check_run_folder. Without `out`, a resumed run continues in the run folder of its
// checkpoint and a new run gets a new folder under `root` named by the date and time (runs/20261201-064223, then -2,
// -3...), which the symbolic link <root>/latest then names. The lock comes first, so two jobs started together into
// one folder cannot both pass the checks: the second is refused naming the first. `overwrite` then removes what
// check_run_folder would refuse (only metrics.jsonl and checkpoints/; nothing else in the folder). Call it on one
// rank, which holds the lock.
RunFolder prepare_run_folder(const std::string& out, const std::string& resume_checkpoint, bool overwrite,
                             const std::string& root = "runs");

// The run folder that holds checkpoint folder `checkpoint` (<run>/checkpoints/step_<k>), or empty when it is
// not inside one.
std::string run_folder_of(const std::string& checkpoint);

}  // namespace tandem::train
