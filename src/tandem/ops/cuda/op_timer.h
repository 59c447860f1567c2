// CUDA timing of op calls for the op profile (ops/profile.h): a pair of CUDA events around each call on the compute
// stream of the call's device, read back when the profile closes a step, so timing never waits for the GPU while
// the step runs. Host-side only; the profiled table in ops/profile.cc calls these around the real entries.
#pragma once

#include <cstddef>
#include <functional>

#include "tandem/core/tensor.h"

namespace tandem::ops::cuda {

// Records a start event on the compute stream of `on`'s device. Calls nest: each start is closed by the next stop
// or abandon on the same device.
void timer_start(const Tensor& on);
// Records the stop event of the innermost open start and queues the pair under `row`.
void timer_stop(const Tensor& on, size_t row);
// Drops the innermost open start (the op threw before its work was queued).
void timer_abandon(const Tensor& on);
// Waits for every queued pair on every device, hands each call's row and elapsed milliseconds to `add`, and
// forgets the pairs (their events are reused).
void timer_drain(const std::function<void(size_t row, double ms)>& add);

}  // namespace tandem::ops::cuda
