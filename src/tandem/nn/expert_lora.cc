// The experts' adapters (expert_lora.h): grouped products over the rows per expert.
#include "tandem/nn/expert_lora.h"

#include "tandem/ops/ops.h"

namespace tandem::nn {

Tensor ExpertLora::forward(const Tensor& x, const std::vector<int64_t>& rows, const Tensor& y) const {
  const int64_t R = x.dim(0), r = a_->shape[1];
  Tensor h = Tensor::empty({R, r}, x.dtype(), x.device(), a_->name + " output");  // (R, r)
  ops::grouped_matmul(x, a_->value, h, rows, true);                               // x A_e^T
  if (scaling_ != 1.0f) ops::scale(h, scaling_);
  ops::grouped_matmul(h, b_->value, y, rows, true, 1.0f);  // y += H B_e^T
  return h;
}

void ExpertLora::backward(const Tensor& x, const Tensor& h, const Tensor& dy, const std::vector<int64_t>& rows,
                          const Tensor& dx) const {
  const int64_t R = dy.dim(0), r = a_->shape[1];
  ops::grouped_weight_grad(dy, h, b_->grad, rows);                                       // dB_e += dy_e^T H_e
  Tensor g = Tensor::empty({R, r}, dy.dtype(), dy.device(), a_->name + " output grad");  // (R, r)
  ops::grouped_matmul(dy, b_->value, g, rows, false);                                    // dy_e B_e
  if (scaling_ != 1.0f) ops::scale(g, scaling_);
  ops::grouped_weight_grad(g, x, a_->grad, rows);            // dA_e += G_e^T x_e
  ops::grouped_matmul(g, a_->value, dx, rows, false, 1.0f);  // dx_e += G_e A_e
}

}  // namespace tandem::nn
