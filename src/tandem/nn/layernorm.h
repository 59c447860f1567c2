// LayerNorm over the last dim with a gain ("weight", ones) and a shift ("bias", zeros), eps 1e-5.
#pragma once

#include "tandem/nn/layer.h"

namespace tandem::nn {

class LayerNorm final : public Layer {
 public:
  LayerNorm(std::string name, int64_t dim);
  // x (..., C) -> y (..., C)
  Tensor forward(const Tensor& x, Saved& saved) override;
  Tensor backward(const Tensor& dy, Saved& saved) override;
  // backward plus a residual gradient (..., C) in the same pass: the input gradient of a pre-LayerNorm block's
  // skip connection and its LayerNorm branch together, what backward then ops::add give.
  Tensor backward_add(const Tensor& dy, const Tensor& dres, Saved& saved);

 private:
  int64_t dim_;
  Parameter* weight_;  // (C)
  Parameter* bias_;    // (C)
};

}  // namespace tandem::nn
