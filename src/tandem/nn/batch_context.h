// BatchContext: where the samples of the micro-batch being run sit, for draws every layout must make alike (LoRA's
// dropout masks). The model owns one (Model::batch_context); the engine sets it before each forward and backward
// action of a micro-batch, and the adapters hold a pointer to it. What the micro-batch carries (targets, documents)
// travels as an argument instead (batch.h).
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"

namespace tandem::nn {

struct BatchContext {
  bool training = false;     // a training step's forward or backward (its recomputation too): dropout applies
  uint64_t seed = 0;         // the run's seed
  int64_t step = 0;          // the training step, 0-based
  int64_t first_sample = 0;  // the micro-batch's first sample: its index in the step's global batch
};

}  // namespace tandem::nn
