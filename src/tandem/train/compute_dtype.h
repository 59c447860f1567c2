// The dtype a run computes in, from its config: bf16, else f16 with fp16 loss scaling, else f32. The trainer's one
// place for this rule (its engine and its checks read it here).
#pragma once

#include "tandem/core/dtype.h"
#include "tandem/spec/train_config.h"

namespace tandem::train {

inline DType compute_dtype(const spec::TrainConfig& cfg) {
  return cfg.bf16 ? DType::BF16 : cfg.fp16.enabled ? DType::F16 : DType::F32;
}

}  // namespace tandem::train
