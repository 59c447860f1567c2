#include "tandem/nn/activation.h"

#include "tandem/ops/op_util.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {

ActivationKind activation_from_name(const std::string& name) {
  if (name == "relu") return ActivationKind::Relu;
  if (name == "gelu") return ActivationKind::Gelu;
  TANDEM_FAIL("unknown activation '", name, "': use \"relu\" or \"gelu\"");
}

Activation::Activation(std::string name, ActivationKind kind, const Parameter* bias)
    : Layer(std::move(name)), kind_(kind), bias_(bias) {
  TANDEM_CHECK(!bias_ || kind_ == ActivationKind::Gelu, this->name(), ": only GELU takes a bias");
}

namespace {
// x (..., C) as rows (N, C), for the biased GELU.
Tensor as_rows(const Tensor& x) { return x.view({ops::rows_of(x), ops::cols_of(x)}); }
}  // namespace

Tensor Activation::forward(const Tensor& x, Saved& saved) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " output");
  if (kind_ == ActivationKind::Relu)
    ops::relu_forward(x, y);
  else if (bias_)
    ops::bias_gelu_forward(as_rows(x), bias_->value, as_rows(y));
  else
    ops::gelu_forward(x, y);
  saved.tensors = {x};  // without the bias: backward adds it again
  return y;
}

Tensor Activation::backward(const Tensor& dy, Saved& saved) {
  const Tensor x = saved.tensors.at(0);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " input grad");
  if (kind_ == ActivationKind::Relu)
    ops::relu_backward(x, dy, dx);
  else if (bias_)
    ops::bias_gelu_backward(as_rows(x), bias_->value, as_rows(dy), as_rows(dx));
  else
    ops::gelu_backward(x, dy, dx);
  saved.clear();
  return dx;
}

}  // namespace tandem::nn
