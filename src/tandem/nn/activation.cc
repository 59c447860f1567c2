#include "tandem/nn/activation.h"

#include "tandem/ops/ops.h"

namespace tandem::nn {

ActivationKind activation_from_name(const std::string& name) {
  if (name == "relu") return ActivationKind::Relu;
  if (name == "gelu") return ActivationKind::Gelu;
  TANDEM_FAIL("unknown activation '", name, "': use \"relu\" or \"gelu\"");
}

Tensor Activation::forward(const Tensor& x, Saved& saved) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " output");
  if (kind_ == ActivationKind::Relu)
    ops::relu_forward(x, y);
  else
    ops::gelu_forward(x, y);
  saved.tensors = {x};
  return y;
}

Tensor Activation::backward(const Tensor& dy, Saved& saved) {
  const Tensor x = saved.tensors.at(0);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " input grad");
  if (kind_ == ActivationKind::Relu)
    ops::relu_backward(x, dy, dx);
  else
    ops::gelu_backward(x, dy, dx);
  saved.clear();
  return dx;
}

}  // namespace tandem::nn
