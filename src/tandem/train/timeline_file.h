// The offload timeline of one step (diagnostics.timeline_step), once the engine has recorded it: written as
// OUT/timeline_rank<r>.json (the current folder without OUT), which chrome://tracing reads, with a summary line.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/parallel/engine.h"

namespace tandem::train {

// Called after each step: nothing until the engine gives the timeline (`at_end`: that step was the run's last).
// `print`: this rank prints the summary line.
void write_timeline(parallel::Engine& engine, bool at_end, const std::string& out_dir, int rank, int64_t timeline_step,
                    bool print);

}  // namespace tandem::train
