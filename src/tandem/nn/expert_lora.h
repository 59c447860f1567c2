// LoRA adapters on a mixture of experts' stacked experts, as Hugging Face PEFT's lora.ParamWrapper computes them on a
// 3-D parameter (target_parameters): one adapter of rank r per expert, so expert e's weight W_e (out, in) acts as
// W_e + s B_e A_e, with A (E, r, in) and B (E, out, r) trainable and W frozen, s = lora_alpha / r (or / sqrt(r) with
// use_rslora). Over the rows routed to each expert (grouped expert by expert, as ops::grouped_matmul takes them):
//   y_e = x_e W_e^T + s (x_e A_e^T) B_e^T: H = s x A_e^T (R, r) and y += H B_e^T, two grouped products;
//   backward from dy_e: dB_e += dy_e^T H_e, G_e = s dy_e B_e (R, r), dA_e += G_e^T x_e, dx_e += G_e A_e.
// No dropout (PEFT refuses lora_dropout on a ParamWrapper). The experts are whole on every tensor-parallel slot, and
// so are their adapters (every slot computes the same rows alike); under expert parallelism A and B are split along
// the expert dim with the experts (MoeMlp::keep_experts), and `rows` holds this slot's experts' rows.
// Legend: R routed rows on this slot, L the slot's experts (E without expert parallelism), r the rank.
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/nn/layer.h"

namespace tandem::nn {

class ExpertLora {
 public:
  // a (L, r, in) and b (L, out, r): the parameters the layer declared (init_lora_pair's initialisation).
  ExpertLora(Parameter& a, Parameter& b, float scaling) : a_(&a), b_(&b), scaling_(scaling) {}

  // x (R, in) grouped by expert, rows[e] each; y (R, out) += s (x A_e^T) B_e^T. Returns H = s x A_e^T (R, r), what
  // backward needs besides x.
  Tensor forward(const Tensor& x, const std::vector<int64_t>& rows, const Tensor& y) const;
  // dy (R, out): accumulates dA and dB, and adds the adapter's part of the input gradient into dx (R, in).
  void backward(const Tensor& x, const Tensor& h, const Tensor& dy, const std::vector<int64_t>& rows,
                const Tensor& dx) const;

 private:
  Parameter* a_;  // (L, r, in)
  Parameter* b_;  // (L, out, r)
  float scaling_;
};

}  // namespace tandem::nn
