// The report at a run's end: each device's peak memory (and each rank's host memory when the engine keeps state or
// layer inputs there), what rank 0 held at its peak, and the op profile when it was on.
#pragma once

#include <cstdint>

#include "tandem/config/config.h"
#include "tandem/device/accounted_device.h"
#include "tandem/layout/groups.h"
#include "tandem/parallel/engine.h"

namespace tandem::train {

// Every rank takes part (the peaks are gathered to rank 0); rank 0 prints when `print`. `last_step`: the steps done.
void report_run(int64_t last_step, const config::TrainConfig& cfg, const layout::ParallelPlan& plan,
                parallel::Engine& engine, const device::AccountedDevice& device, layout::Groups& groups, bool print);

}  // namespace tandem::train
