// What a run reports of each step besides metrics.jsonl: its line on stdout and its events for DeepSpeed's monitors
// (monitor.h writes them).
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/train/monitor.h"
#include "tandem/train/step_metrics.h"

namespace tandem::train {

// "step 3/100 | loss 2.1234 | lr ... | ETA 1m2s"; `unit` is "tok" or "samples" (of the rate per second).
void print_progress(const StepMetrics& m, int64_t total, double eta_s, const char* unit);
// The line of a step whose fp16 gradients overflowed, so its update was skipped.
void print_skipped(const StepMetrics& m, int64_t total);

// The tags and values of one step: DeepSpeed's where it has them (the loss scale with `fp16`), then Tandem's;
// `tokens`: the rate counts tokens, else samples.
std::vector<MonitorEvent> monitor_events(const StepMetrics& m, bool fp16, bool tokens);

}  // namespace tandem::train
