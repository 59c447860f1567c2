// FP8 training as plain values, with no JSON and no parsing: what config/ reads the "fp8" object into and what the
// model factory and nn take. The products of a decoder block's projections run in FP8 (e4m3 inputs and weights, e5m2
// output gradients, fp32 sums); attention, norms, embeddings, the head, the loss and the optimizer stay in the compute
// dtype and fp32 (ops.h, "FP8").
#pragma once

#include <cstdint>
#include <string>

#include "tandem/core/dtype.h"

namespace tandem::spec {

// How a tensor is scaled into FP8: power-of-two scales from the current amaxes of the logical tensor's blocks (the
// maximum over the tensor-parallel slots where a block spans several), so every layout scales alike (nn/linear.h).
// Tensorwise: one scale per tensor. Rowwise: one per row of each operand along the product's K (torchao's rowwise).
// Blockwise: 1 x 128 tiles of activations and gradients, 128 x 128 tiles of weights (DeepSeek-V3's).
enum class Fp8Recipe { Tensorwise, Rowwise, Blockwise };

inline const char* fp8_recipe_name(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::Tensorwise:
      return "tensorwise";
    case Fp8Recipe::Rowwise:
      return "rowwise";
    case Fp8Recipe::Blockwise:
      return "blockwise";
  }
  return "?";
}

struct Fp8Config {
  bool enabled = false;
  Fp8Recipe recipe = Fp8Recipe::Tensorwise;
  // A projection with fewer input or output features than this stays in the compute dtype (FP8 does not pay there).
  int64_t min_features = 0;
  // The output gradients' format: E5M2 (torchao's and Transformer Engine's choice for one scale per tensor or row: 2
  // mantissa bits, the range of fp16) or E4M3 (a mantissa bit more, 2^13 less range: the config's default for the
  // blockwise recipe).
  DType gradients = DType::E5M2;
};

}  // namespace tandem::spec
