// The global-batch sampler: which sample (or which window start) fills slot i of the global batch of a step.
// Pure functions of (seed, step, i), so the position to resume from is just the step number. No file access.
#pragma once

#include <cstdint>

namespace tandem::data {

// The sample in [0, num_samples) at slot `i` of the global batch of `step`. Samples are drawn with
// replacement (a fresh Philox draw per slot, not a shuffled epoch), so a sample may repeat within a batch;
// the modulo bias is below num_samples / 2^64 and ignored.
int64_t sample_index(uint64_t seed, int64_t step, int64_t i, int64_t num_samples);

// The start offset in [0, num_starts) of the window at slot `i` of `step`, drawn the same way from an
// independent stream.
int64_t window_start(uint64_t seed, int64_t step, int64_t i, int64_t num_starts);

}  // namespace tandem::data
