// The host's draws (random_fill.h). This file and philox.cc are compiled with -ffp-contract=off, so that no product
// and sum is fused into an fma that the GPU's draws do not make.
#include "tandem/core/random_fill.h"

namespace tandem {

void random_fill_host(float* out, int64_t n, const RandomFill& fill) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = random_fill_value(fill, i);
}

namespace {
PhiloxBlock block_at(uint64_t seed, uint64_t stream, uint64_t index) {
  PhiloxBlock b;
  philox_block_at(seed, stream, index, b.data());
  return b;
}
}  // namespace

float normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxBlock b = block_at(seed, stream, index);
  return normal_from_words(b[0], b[1]);
}

float uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
  return uniform_from_bits(block_at(seed, stream, index)[2]);
}

uint64_t bits64_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxBlock b = block_at(seed, stream, index);
  return (static_cast<uint64_t>(b[3]) << 32) | b[2];
}

}  // namespace tandem
