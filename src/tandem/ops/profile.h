// The op profile: where a training step's time goes. Once set_enabled (the trainer's, with TANDEM_PROFILE=1), ops.cc
// dispatches CPU and CUDA tensors through timed copies of the backend tables: each call's time (host clock on CPU, a
// pair of CUDA events on the compute stream on GPUs, read only when a step closes) and its work (work.h) are added
// to a row per op name, and for matmul per shape and dtype. The trainer closes each step with end_step and prints
// table() after the run: per op the calls, milliseconds and share of the mean step, the achieved TFLOP/s (matmul,
// attention) or GB/s (the rest), and the step time no op accounts for (host gaps, waits, copies, collectives).
// Profiling adds two event records per op call on GPUs (host time only); it is for finding time, not for the speed
// figure of a run.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tandem/ops/backend.h"

namespace tandem::ops::profile {

// Off until set_enabled(true): the trainer's with TANDEM_PROFILE (core/diagnostics.h), or tests and tools.
bool enabled();
void set_enabled(bool on);

// The timed tables ops.cc dispatches through while enabled: each entry times and calls the real backend's.
const Backend& cpu_backend();
const Backend& cuda_backend();  // only in builds with the CUDA backend

// Closes the step that began at `start`: waits for the CUDA timings still queued, records the wall time from
// `start` to now, and opens the next step. Ops called before the first end_step belong to the first step.
void end_step(std::chrono::steady_clock::time_point start);
// Forgets every step and row.
void reset();

// One row of the mean step.
struct Row {
  std::string op;      // op name, e.g. "matmul"
  std::string detail;  // matmul, linear_forward, linear_weight_grad: "M x N x K, transposes, dtypes"; else empty
  double calls = 0, ms = 0, flops = 0, bytes = 0;  // per step
};
struct Summary {
  int steps_run = 0;     // steps closed
  int first = 0;         // 0-based index of the first step averaged
  int steps = 0;         // steps averaged: those after the first two (warm-up), or all when there are 2 or fewer
  double step_ms = 0;    // mean wall time of those steps
  std::vector<Row> ops;  // per op name, the largest total first; matmul's shape rows follow it, largest first
  double op_ms() const;  // the sum of the op rows (without the shape rows)
};
Summary summary();
// The printed table of a summary ("" when no step was closed). `who` names the process, e.g. "rank 0".
std::string table(const Summary& s, const std::string& who);

}  // namespace tandem::ops::profile
