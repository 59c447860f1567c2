// BatchContext: what a layer may need to know about the micro-batch it runs on besides its input: where its samples
// sit (for draws every layout must make alike: LoRA's dropout masks) and its documents (attention kept inside each).
// The model owns one (Model::batch_context); the engine sets it before each forward and backward action of a
// micro-batch, and layers that need it hold a pointer to it. Layers that do not need it never see it.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"

namespace tandem::nn {

struct BatchContext {
  bool training = false;     // a training step's forward or backward (its recomputation too): dropout applies
  uint64_t seed = 0;         // the run's seed
  int64_t step = 0;          // the training step, 0-based
  int64_t first_sample = 0;  // the micro-batch's first sample: its index in the step's global batch
  // (B, T) i32 on the device: each position's document in its window (data.document_mask), attention kept inside
  // each; undefined: causal attention over the whole window.
  Tensor documents;
};

}  // namespace tandem::nn
