// Activation: an elementwise nonlinearity with no parameters of its own (ReLU, or GELU with the tanh approximation,
// optionally of a biased input: a preceding Linear's bias folded into the same pass).
#pragma once

#include "tandem/nn/layer.h"

namespace tandem::nn {

enum class ActivationKind { Relu, Gelu };
ActivationKind activation_from_name(const std::string& name);  // "relu" | "gelu"

class Activation final : public Layer {
 public:
  // `bias` (GELU only): a preceding Linear's deferred bias (Linear::defer_bias), added to x (..., C) in the same pass
  // as the GELU; the Linear keeps the parameter and its gradient.
  Activation(std::string name, ActivationKind kind, const Parameter* bias = nullptr);
  Tensor forward(const Tensor& x, Saved& saved) override;
  Tensor backward(const Tensor& dy, Saved& saved) override;

 private:
  ActivationKind kind_;
  const Parameter* bias_;  // (C) or null
};

}  // namespace tandem::nn
