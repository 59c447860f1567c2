// The host's draws (random_fill.h). This file and philox.cc are compiled with -ffp-contract=off, so that no product
// and sum is fused into an fma that the GPU's draws do not make.
#include "tandem/core/random_fill.h"

namespace tandem {

void random_fill_host(float* out, int64_t n, const RandomFill& fill) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = random_fill_value(fill, i);
}

}  // namespace tandem
