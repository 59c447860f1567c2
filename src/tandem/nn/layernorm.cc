#include "tandem/nn/layernorm.h"

#include "tandem/ops/ops.h"

namespace tandem::nn {

LayerNorm::LayerNorm(std::string name, int64_t dim) : Layer(std::move(name)), dim_(dim) {
  weight_ = &add_parameter("weight", {dim}, Init::Ones, false);
  bias_ = &add_parameter("bias", {dim}, Init::Zeros, false);
}

Tensor LayerNorm::forward(const Tensor& x, Saved& saved) {
  TANDEM_CHECK(x.dim(-1) == dim_, name(), " expects last dim ", dim_, ", got ", shape_str(x.shape()));
  const int64_t rows = x.numel() / dim_;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " output");  // (..., C)
  Tensor mean = Tensor::empty({rows}, DType::F32, x.device(), name() + " mean");   // (N)
  Tensor rstd = Tensor::empty({rows}, DType::F32, x.device(), name() + " rstd");   // (N)
  ops::layernorm_forward(x.view({rows, dim_}), weight_->value, bias_->value, y.view({rows, dim_}), mean, rstd);
  saved.tensors = {x, mean, rstd};
  return y;
}

Tensor LayerNorm::backward(const Tensor& dy, Saved& saved) {
  const Tensor x = saved.tensors.at(0);
  const int64_t rows = x.numel() / dim_;
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " input grad");
  ops::layernorm_backward(dy.view({rows, dim_}), x.view({rows, dim_}), weight_->value, saved.tensors.at(1),
                          saved.tensors.at(2), dx.view({rows, dim_}), gradient_or_sink(*weight_, x.device()),
                          gradient_or_sink(*bias_, x.device()));
  saved.clear();
  return dx;
}

Tensor LayerNorm::backward_add(const Tensor& dy, const Tensor& dres, Saved& saved) {
  const Tensor x = saved.tensors.at(0);
  const int64_t rows = x.numel() / dim_;
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " input grad");
  ops::layernorm_backward_add(dy.view({rows, dim_}), x.view({rows, dim_}), weight_->value, saved.tensors.at(1),
                              saved.tensors.at(2), dres.view({rows, dim_}), dx.view({rows, dim_}),
                              gradient_or_sink(*weight_, x.device()), gradient_or_sink(*bias_, x.device()));
  saved.clear();
  return dx;
}

}  // namespace tandem::nn
