// The global-batch sampler (see sampler.h); what a sample holds is up to each dataset.
#include "tandem/data/sampler.h"

#include "tandem/core/error.h"
#include "tandem/core/random_fill.h"

namespace tandem::data {
namespace {

// One Philox stream per (purpose, step); the tag keeps these streams away from the model's init streams.
int64_t draw(uint64_t seed, const char* tag, int64_t step, int64_t i, int64_t n) {
  TANDEM_CHECK(step >= 0 && i >= 0 && n >= 1, "step ", step, ", slot ", i, ", range ", n);
  const uint64_t stream = hash_name(tag) + static_cast<uint64_t>(step);
  return static_cast<int64_t>(bits64_at(seed, stream, static_cast<uint64_t>(i)) % static_cast<uint64_t>(n));
}

}  // namespace

int64_t sample_index(uint64_t seed, int64_t step, int64_t i, int64_t num_samples) {
  return draw(seed, "tandem.data.sample", step, i, num_samples);
}

int64_t window_start(uint64_t seed, int64_t step, int64_t i, int64_t num_starts) {
  return draw(seed, "tandem.data.window", step, i, num_starts);
}

}  // namespace tandem::data
