// Activation: an elementwise nonlinearity with no parameters (ReLU, or GELU with the tanh approximation).
#pragma once

#include "tandem/nn/layer.h"

namespace tandem::nn {

enum class ActivationKind { Relu, Gelu };
ActivationKind activation_from_name(const std::string& name);  // "relu" | "gelu"

class Activation final : public Layer {
 public:
  Activation(std::string name, ActivationKind kind) : Layer(std::move(name)), kind_(kind) {}
  Tensor forward(const Tensor& x, Saved& saved) override;
  Tensor backward(const Tensor& dy, Saved& saved) override;

 private:
  ActivationKind kind_;
};

}  // namespace tandem::nn
