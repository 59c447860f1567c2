// The run folder: where one run writes metrics.jsonl and checkpoints/. It owns the rule that a run never
// writes into, deletes from or mixes with another run's files; it does not write metrics or checkpoints.
#pragma once

#include <string>

namespace tandem::train {

// Refuses (Error naming the folder and what to do) when `out` holds another run's files: a metrics.jsonl or
// anything under checkpoints/, unless `resume_checkpoint` (a checkpoint folder, or empty) is a checkpoint of
// `out` itself and no newer checkpoint follows it there (resuming an older one would branch the run).
void check_run_folder(const std::string& out, const std::string& resume_checkpoint);

// Chooses, checks and creates the folder a run writes. `out` as asked (empty: not given); `resume_checkpoint`
// as for check_run_folder. Without `out`, a resumed run continues in the run folder of its checkpoint and a new
// run gets a new folder under `root` named by the date and time (runs/20261201-064223, then -2, -3...), which the
// symbolic link <root>/latest then names. `overwrite` first removes what check_run_folder would refuse (only
// metrics.jsonl and checkpoints/; nothing else in the folder). Returns the folder. Call it on one rank.
std::string prepare_run_folder(const std::string& out, const std::string& resume_checkpoint, bool overwrite,
                               const std::string& root = "runs");

// The run folder that holds checkpoint folder `checkpoint` (<run>/checkpoints/step_<k>), or empty when it is
// not inside one.
std::string run_folder_of(const std::string& checkpoint);

}  // namespace tandem::train
