// The mixture-of-experts MLP (moe.h): route, group by expert, one product pair per expert, combine; and back.
#include "tandem/nn/moe.h"

#include <vector>

#include "tandem/ops/ops.h"

namespace tandem::nn {

MoeMlp::MoeMlp(std::string name, const MoeShape& s) : Layer(std::move(name)), shape_(s) {
  TANDEM_CHECK(s.experts > 0 && s.top_k > 0 && s.top_k <= s.experts && s.dim > 0 && s.intermediate > 0, this->name(),
               ": ", s.top_k, " of ", s.experts, " experts of width ", s.intermediate, " over ", s.dim, " channels");
  router_ = &add_parameter("router.weight", {s.experts, s.dim}, Init::Normal, true);
  gate_up_ = &add_parameter("gate_up.weight", {s.experts, 2 * s.intermediate, s.dim}, Init::Normal, true);
  down_ = &add_parameter("down.weight", {s.experts, s.dim, s.intermediate}, Init::Normal, true);
}

namespace {
// What forward keeps for backward, in Saved::tensors.
enum SavedAt { kInput, kProbs, kChoices, kWeights, kRows, kOffsets, kRouted, kGateUp, kHidden, kOutputs, kCount };
}  // namespace

Tensor MoeMlp::forward(const Tensor& x, Saved& saved) {
  return forward_add(x, Tensor::zeros(x.shape(), x.dtype(), x.device(), name() + " residual"), Batch{}, saved, false);
}

Tensor MoeMlp::forward_add(const Tensor& x, const Tensor& residual, const Batch& batch, Saved& saved, bool count) {
  const int64_t C = x.dim(-1), N = x.numel() / C, E = shape_.experts, F = shape_.intermediate;
  const int k = shape_.top_k;
  const int64_t M = N * k;
  Device& dev = x.device();
  const Tensor x2 = x.view({N, C});
  Tensor logits = Tensor::empty({N, E}, DType::F32, dev, name() + " router logits");  // (N, E)
  ops::matmul(x2, router_->value, logits, false, true);
  Tensor probs = Tensor::empty({N, E}, DType::F32, dev, name() + " router probabilities");  // (N, E)
  Tensor choices = Tensor::empty({N, k}, DType::I32, dev, name() + " expert choices");      // (N, k)
  Tensor weights = Tensor::empty({N, k}, DType::F32, dev, name() + " expert weights");      // (N, k)
  ops::moe_route(logits, k, shape_.normalize, probs, choices, weights);
  logits = Tensor();
  if (count && batch.balance) ops::moe_route_stats(probs, choices, batch.balance->counts, batch.balance->probsum);
  Tensor rows = Tensor::empty({N, k}, DType::I32, dev, name() + " routed rows");  // (N, k)
  Tensor offsets = Tensor::empty({E + 1}, DType::I32, dev, name() + " expert offsets");
  ops::moe_order(choices, static_cast<int>(E), rows, offsets);
  const std::vector<int64_t> per_expert = ops::moe_expert_rows(offsets, M);
  Tensor routed = Tensor::empty({M, C}, x.dtype(), dev, name() + " routed inputs");  // (M, C)
  ops::moe_gather(x2, rows, routed);
  Tensor gate_up = Tensor::empty({M, 2 * F}, x.dtype(), dev, name() + " expert gate_up");  // (M, 2F)
  Tensor hidden = Tensor::empty({M, F}, x.dtype(), dev, name() + " expert hidden");        // (M, F)
  Tensor outputs = Tensor::empty({M, C}, x.dtype(), dev, name() + " expert outputs");      // (M, C)
  ops::grouped_matmul(routed, gate_up_->value, gate_up, per_expert, true);
  ops::swiglu_forward(gate_up, hidden);
  ops::grouped_matmul(hidden, down_->value, outputs, per_expert, true);
  Tensor y = Tensor::empty(residual.shape(), residual.dtype(), dev, name() + " output");  // (..., C)
  y.copy_from(residual);
  ops::moe_combine(outputs, rows, weights, y.view({N, C}));
  saved.tensors.assign(kCount, Tensor());
  saved.tensors[kInput] = x2;
  saved.tensors[kProbs] = probs;
  saved.tensors[kChoices] = choices;
  saved.tensors[kWeights] = weights;
  saved.tensors[kRows] = rows;
  saved.tensors[kOffsets] = offsets;
  saved.tensors[kRouted] = routed;
  saved.tensors[kGateUp] = gate_up;
  saved.tensors[kHidden] = hidden;
  saved.tensors[kOutputs] = outputs;
  return y;
}

Tensor MoeMlp::backward(const Tensor& dy, const Batch& batch, Saved& saved) {
  const Tensor x = saved.tensors.at(kInput), probs = saved.tensors.at(kProbs), choices = saved.tensors.at(kChoices);
  const Tensor weights = saved.tensors.at(kWeights), rows = saved.tensors.at(kRows);
  const Tensor routed = saved.tensors.at(kRouted), gate_up = saved.tensors.at(kGateUp);
  const Tensor hidden = saved.tensors.at(kHidden), outputs = saved.tensors.at(kOutputs);
  const int64_t N = x.dim(0), C = x.dim(1), E = shape_.experts, F = shape_.intermediate;
  const int k = shape_.top_k;
  const int64_t M = N * k;
  Device& dev = dy.device();
  const std::vector<int64_t> per_expert = ops::moe_expert_rows(saved.tensors.at(kOffsets), M);
  // The combine: each routed row's gradient and each weight's.
  Tensor doutputs = Tensor::empty({M, C}, dy.dtype(), dev, name() + " expert outputs grad");  // (M, C)
  Tensor dweights = Tensor::empty({N, k}, DType::F32, dev, name() + " expert weights grad");  // (N, k)
  ops::moe_combine_backward(dy.view({N, C}), outputs, rows, weights, doutputs, dweights);
  // The experts, each over its rows: down, SwiGLU (in place over gate_up), gate_up.
  Tensor dhidden = Tensor::empty({M, F}, dy.dtype(), dev, name() + " expert hidden grad");  // (M, F)
  ops::grouped_matmul(doutputs, down_->value, dhidden, per_expert, false);
  if (down_->trainable) ops::grouped_weight_grad(doutputs, hidden, down_->grad, per_expert);
  ops::swiglu_backward(gate_up, dhidden, gate_up);
  Tensor drouted = Tensor::empty({M, C}, dy.dtype(), dev, name() + " routed inputs grad");  // (M, C)
  ops::grouped_matmul(gate_up, gate_up_->value, drouted, per_expert, false);
  if (gate_up_->trainable) ops::grouped_weight_grad(gate_up, routed, gate_up_->grad, per_expert);
  Tensor dx = Tensor::zeros({N, C}, dy.dtype(), dev, name() + " input grad");  // (N, C)
  ops::moe_combine(drouted, rows, Tensor(), dx);
  // The router: the weights' gradient and the balance loss's, through the top-k and the softmax.
  Tensor aux;  // (E): coef share E C_e / R^2, scaled as the loss's gradient is
  const MoeBalance* balance = batch.balance;
  if (balance && balance->coef > 0.0f && batch.loss) {
    aux = Tensor::empty({E}, DType::F32, dev, name() + " balance grad");
    aux.copy_from(balance->counts);
    const double r = static_cast<double>(balance->rows);
    ops::scale(aux, static_cast<float>(balance->coef * balance->share * static_cast<double>(E) / (r * r) *
                                       batch.loss->grad_scale));
  }
  Tensor dlogits = Tensor::empty({N, E}, DType::F32, dev, name() + " router logits grad");  // (N, E)
  ops::moe_route_backward(probs, choices, dweights, shape_.normalize, aux, dlogits);
  Tensor dlogits_x = dlogits;  // (N, E) in the compute dtype, as the router's products take it
  if (dy.dtype() != DType::F32) {
    dlogits_x = Tensor::empty({N, E}, dy.dtype(), dev, name() + " router logits grad (compute dtype)");
    ops::cast(dlogits, dlogits_x);
  }
  ops::matmul(dlogits_x, router_->value, dx, false, false, 1.0f);
  if (router_->trainable) ops::linear_weight_grad(dlogits_x, x, router_->grad, Tensor());
  saved.clear();
  return dx.view(dy.shape());
}

}  // namespace tandem::nn
