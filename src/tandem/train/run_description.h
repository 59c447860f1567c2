// The lines a run prints once before step 1: its data and batch, then its model, layout, offload, ranks, stages,
// LoRA adapters, FP8 projections, schedule, monitors and profile.
#pragma once

#include "tandem/config/config.h"
#include "tandem/data/dataset.h"
#include "tandem/layout/groups.h"
#include "tandem/parallel/engine.h"
#include "tandem/train/monitor.h"

namespace tandem::train {

// "data: ...", "eval: ..." (with `eval`, else null) and "batch: ..." for the layout `l`.
void print_data(const config::TrainConfig& cfg, const data::Dataset& data, const data::Dataset* eval,
                const layout::Layout& l);
// "model: ...; layout ..." and what follows, once the engine is built on a device of `kind`; `monitor` may be null.
void print_setup(const config::TrainConfig& cfg, const layout::ParallelPlan& plan, const layout::Layout& l,
                 parallel::Engine& engine, DeviceKind kind, const Monitor* monitor);

}  // namespace tandem::train
