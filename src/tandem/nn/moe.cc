// The mixture-of-experts MLP (moe.h): route, group by expert, one product pair per expert, combine; and back. Under
// expert parallelism the grouped rows travel to their experts' slots and back in between.
#include "tandem/nn/moe.h"

#include <vector>

#include "tandem/nn/expert_route.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {

MoeMlp::MoeMlp(std::string name, const MoeShape& s, TpSlot tp) : Layer(std::move(name)), shape_(s) {
  TANDEM_CHECK(s.experts > 0 && s.top_k > 0 && s.top_k <= s.experts && s.dim > 0 && s.intermediate > 0, this->name(),
               ": ", s.top_k, " of ", s.experts, " experts of width ", s.intermediate, " over ", s.dim, " channels");
  router_ = &add_parameter("router.weight", {s.experts, s.dim}, Init::Normal, true);
  gate_up_ = &add_parameter("gate_up.weight", {s.experts, 2 * s.intermediate, s.dim}, Init::Normal, true);
  down_ = &add_parameter("down.weight", {s.experts, s.dim, s.intermediate}, Init::Normal, true);
  per_expert_ = {gate_up_, down_};
  if (s.shared > 0) {
    shared_gate_ = &add_parameter("shared_expert_gate.weight", {1, s.dim}, Init::Normal, true);
    shared_gate_up_ =
        std::make_unique<Linear>(child_name("shared_gate_up"), s.dim, 2 * s.shared, false, Split::Column, tp, 2);
    shared_down_ = std::make_unique<Linear>(child_name("shared_down"), s.shared, s.dim, false, Split::Row, tp);
    add_child(*shared_gate_up_);
    add_child(*shared_down_);
  }
}

std::unique_ptr<ExpertLora> MoeMlp::adapt_experts(const LoraTargets& targets, const std::string& part, int64_t out,
                                                  int64_t in) {
  if (!targets.sites.count(child_name(part))) return nullptr;
  const LoraOptions& o = targets.options;
  TANDEM_CHECK(o.dropout == 0.0f, name(), ": the experts' adapters take no dropout, ", o.dropout, " asked");
  const int64_t E = shape_.experts;
  Parameter& a = add_parameter(part + ".lora_A", {E, o.r, in}, Init::Uniform, true);  // (E, r, in)
  Parameter& b = add_parameter(part + ".lora_B", {E, out, o.r}, Init::Zeros, true);   // (E, out, r)
  init_lora_pair(a, b, o, in, E * o.r);  // PEFT's A (E r, in) and B (out, r E), each one nn.Linear
  per_expert_.push_back(&a);
  per_expert_.push_back(&b);
  return std::make_unique<ExpertLora>(a, b, o.scaling);
}

int MoeMlp::add_lora(const LoraTargets& targets) {
  gate_up_lora_ = adapt_experts(targets, "gate_up", 2 * shape_.intermediate, shape_.dim);
  down_lora_ = adapt_experts(targets, "down", shape_.dim, shape_.intermediate);
  const int experts = (gate_up_lora_ ? 1 : 0) + (down_lora_ ? 1 : 0);
  if (!shared_gate_) return experts;
  int added = experts + shared_gate_up_->adapt(targets, 0, "gate") + shared_gate_up_->adapt(targets, 1, "up") +
              shared_down_->adapt(targets, -1, "");
  if (!targets.sites.count(child_name("shared_expert_gate"))) return added;
  // The gate (C -> 1): replicated over tp with its input, so its adapter has no tp sums.
  const LoraOptions& o = targets.options;
  const int64_t C = shape_.dim;
  shared_gate_lora_ = std::make_unique<LoraAdapters>(o, false, TpSlot{}, C, C, 1);
  Parameter& a = add_parameter("shared_expert_gate.lora_A", {o.r, C}, Init::Uniform, true);  // (r, C)
  Parameter& b = add_parameter("shared_expert_gate.lora_B", {1, o.r}, Init::Zeros, true);    // (1, r)
  init_lora_pair(a, b, o, C);
  shared_gate_lora_->add({&a, &b, 0, 1});
  return added + 1;
}

void MoeMlp::keep_experts(const ExpertSlot& slot) {
  TANDEM_CHECK(!gate_up_->value.defined(), name(), ": experts placed after the parameters were materialised");
  TANDEM_CHECK(slot.size >= 1 && shape_.experts % slot.size == 0 && (slot.size == 1 || slot.exchange), name(), ": ",
               shape_.experts, " experts over ", slot.size, " expert slots");
  slot_ = slot;
  if (!slot.active()) return;
  const int64_t L = shape_.experts / slot.size;
  for (Parameter* p : per_expert_) {
    const int64_t per_expert = shape_numel(p->global_shape) / shape_.experts;
    p->shard = Shard{1, shape_.experts, per_expert, slot.rank, slot.size};
    p->shape = {L, p->global_shape[1], p->global_shape[2]};
    p->expert = true;
  }
}

namespace {
// What forward keeps for backward, in Saved::tensors. Expert-parallel: kRouted holds the rows this slot's experts
// received (expert-major), and kSlotOffsets, kOrder and kInverse the route.
enum SavedAt {
  kInput,
  kProbs,
  kChoices,
  kWeights,
  kRows,
  kOffsets,
  kRouted,
  kGateUp,
  kHidden,
  kOutputs,
  kSlotOffsets,
  kOrder,
  kInverse,
  kSharedGateUp,
  kSharedOut,
  kSharedGate,
  kIdentity,
  kSharedRows,      // the shared expert's input rows (..., C), with the gate's adapter
  kSharedGateLora,  // the gate adapter's s x A^T (N, r)
  kGateUpLora,      // the experts' adapters' s x A_e^T (R, r): gate_up's, then down's
  kDownLora,
  kCount
};
// The shared expert's linears keep theirs in Saved::children.
enum SavedChild { kSharedUpChild, kSharedDownChild, kChildren };

// The route from every slot's expert offsets (P (E + 1)), each slot's M rows.
ExpertRoute route_of(const Tensor& slot_offsets, int slots, int slot, int64_t experts, int64_t rows) {
  std::vector<std::vector<int64_t>> counts;
  for (int s = 0; s < slots; ++s)
    counts.push_back(
        ops::moe_expert_rows(slot_offsets.flat_slice(s * (experts + 1), experts + 1, {experts + 1}), rows));
  return plan_expert_route(counts, slot);
}

// (R, 1) int32 on `dev` from the host.
Tensor index_tensor(const std::vector<int32_t>& index, Device& dev, const std::string& what) {
  Tensor t = Tensor::empty({static_cast<int64_t>(index.size()), 1}, DType::I32, dev, what);
  t.copy_from_host(index.data());
  return t;
}
}  // namespace

Tensor MoeMlp::forward(const Tensor& x, Saved& saved) {
  return forward_add(x, Tensor::zeros(x.shape(), x.dtype(), x.device(), name() + " residual"), Batch{}, saved, false);
}

Tensor MoeMlp::forward_add(const Tensor& x, const Tensor& residual, const Batch& batch, Saved& saved, bool count) {
  const int64_t C = x.dim(-1), N = x.numel() / C, E = shape_.experts;
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
  if (count && batch.balance) {
    const MoeBalance& b = *batch.balance;
    ops::moe_route_stats(probs, choices, b.counts, b.probsum);
    if (b.layer_counts.defined())
      ops::moe_route_stats(probs, choices, b.layer_counts.flat_slice(shape_.index * E, E, {E}),
                           b.layer_probsum.flat_slice(shape_.index * E, E, {E}));
  }
  Tensor rows = Tensor::empty({N, k}, DType::I32, dev, name() + " routed rows");  // (N, k)
  Tensor offsets = Tensor::empty({E + 1}, DType::I32, dev, name() + " expert offsets");
  ops::moe_order(choices, static_cast<int>(E), rows, offsets);
  const std::vector<int64_t> per_expert = ops::moe_expert_rows(offsets, M);
  Tensor routed = Tensor::empty({M, C}, x.dtype(), dev, name() + " routed inputs");  // (M, C)
  ops::moe_gather(x2, rows, routed);
  saved.tensors.assign(kCount, Tensor());
  const Tensor outputs = experts_forward(routed, offsets, per_expert, saved);             // (M, C)
  Tensor y = Tensor::empty(residual.shape(), residual.dtype(), dev, name() + " output");  // (..., C)
  y.copy_from(residual);
  ops::moe_combine(outputs, rows, weights, y.view({N, C}));
  if (shared_gate_) shared_forward(x, y.view({N, C}), batch, saved);
  saved.tensors[kInput] = x2;
  saved.tensors[kProbs] = probs;
  saved.tensors[kChoices] = choices;
  saved.tensors[kWeights] = weights;
  saved.tensors[kRows] = rows;
  saved.tensors[kOffsets] = offsets;
  saved.tensors[kOutputs] = outputs;
  return y;
}

Tensor MoeMlp::experts_forward(const Tensor& routed, const Tensor& offsets, const std::vector<int64_t>& per_expert,
                               Saved& saved) {
  if (!slot_.active()) return products(saved.tensors[kRouted] = routed, per_expert, saved);
  const int64_t M = routed.dim(0), C = routed.dim(1), E = shape_.experts;
  Device& dev = routed.device();
  // Every slot's rows per expert, then this slot's rows to their experts' slots and the rows of its own experts in.
  Tensor slot_offsets = Tensor::empty({slot_.size * (E + 1)}, DType::I32, dev, name() + " every slot's offsets");
  slot_.exchange->gather(offsets, slot_offsets);
  const ExpertRoute route = route_of(slot_offsets, slot_.size, slot_.rank, E, M);
  const int64_t R = route.received();
  Tensor arrived = Tensor::empty({R, C}, routed.dtype(), dev, name() + " rows from the slots");  // (R, C) slot-major
  slot_.exchange->rows(routed, route.send, arrived, route.recv);
  Tensor order = index_tensor(route.order, dev, name() + " expert-major order");
  Tensor inverse = index_tensor(route.inverse, dev, name() + " slot-major order");
  Tensor expert_in = Tensor::empty({R, C}, routed.dtype(), dev, name() + " this slot's expert inputs");  // (R, C)
  ops::moe_gather(arrived, order, expert_in);
  arrived = Tensor();
  const Tensor expert_out = products(expert_in, route.per_expert, saved);
  Tensor leaving = Tensor::empty({R, C}, routed.dtype(), dev, name() + " outputs to the slots");  // (R, C) slot-major
  ops::moe_gather(expert_out, inverse, leaving);
  Tensor outputs = Tensor::empty({M, C}, routed.dtype(), dev, name() + " expert outputs");  // (M, C)
  slot_.exchange->rows(leaving, route.recv, outputs, route.send);
  saved.tensors[kRouted] = expert_in;
  saved.tensors[kSlotOffsets] = slot_offsets;
  saved.tensors[kOrder] = order;
  saved.tensors[kInverse] = inverse;
  return outputs;
}

void MoeMlp::shared_forward(const Tensor& rows, const Tensor& y, const Batch& batch, Saved& saved) {
  const int64_t C = rows.dim(-1), N = rows.numel() / C;
  const Tensor x = rows.view({N, C});
  Shape hidden_shape = rows.shape();  // (..., Fs / tp): the rows' own shape, for the adapters' dropout keys
  hidden_shape.back() = shared_down_->in_features();
  Device& dev = x.device();
  saved.children.resize(kChildren);
  Tensor gate_up = shared_gate_up_->forward(rows, batch, saved.children[kSharedUpChild]);  // (..., 2Fs / tp)
  Tensor hidden = Tensor::empty(hidden_shape, x.dtype(), dev, name() + " shared hidden");  // (..., Fs / tp)
  ops::swiglu_forward(gate_up, hidden);
  const Tensor out =
      shared_down_->forward(hidden, batch, saved.children[kSharedDownChild]).view({N, C});  // summed over tp
  Tensor gate = Tensor::empty({N, 1}, DType::F32, dev, name() + " shared expert gate");     // (N, 1)
  ops::matmul(x, shared_gate_->value, gate, false, true);
  if (shared_gate_lora_) {
    const std::vector<Tensor> h = shared_gate_lora_->down(rows, batch);  // one (N, r)
    shared_gate_lora_->up(h, gate);                                      // gate += s (x A^T) B^T, in fp32
    saved.tensors[kSharedRows] = rows;
    saved.tensors[kSharedGateLora] = h.at(0);
  }
  ops::sigmoid_forward(gate, gate);
  // Each token's row weighted by its gate: the combine of one choice per token, the token's own row.
  std::vector<int32_t> own(static_cast<size_t>(N));
  for (int64_t t = 0; t < N; ++t) own[static_cast<size_t>(t)] = static_cast<int32_t>(t);
  Tensor identity = index_tensor(own, dev, name() + " shared expert rows");  // (N, 1)
  ops::moe_combine(out, identity, gate, y);
  saved.tensors[kSharedGateUp] = gate_up;
  saved.tensors[kSharedOut] = out;
  saved.tensors[kSharedGate] = gate;
  saved.tensors[kIdentity] = identity;
}

void MoeMlp::shared_backward(const Tensor& dy, const Tensor& dx, const Batch& batch, Saved& saved) {
  const Tensor gate_up = saved.tensors.at(kSharedGateUp), out = saved.tensors.at(kSharedOut);
  const Tensor gate = saved.tensors.at(kSharedGate), identity = saved.tensors.at(kIdentity);
  const Tensor x = saved.tensors.at(kInput);
  const int64_t N = dy.dim(0), C = dy.dim(1);
  Device& dev = dy.device();
  // dout = gate dy; dgate = dy . out, then through the sigmoid.
  Tensor dout = Tensor::empty({N, C}, dy.dtype(), dev, name() + " shared output grad");        // (N, C)
  Tensor dgate = Tensor::empty({N, 1}, DType::F32, dev, name() + " shared expert gate grad");  // (N, 1)
  ops::moe_combine_backward(dy, out, identity, gate, dout, dgate);
  ops::sigmoid_backward(gate, dgate, dgate);
  Shape out_shape = gate_up.shape();  // (..., C): the rows' own shape, as forward gave them
  out_shape.back() = C;
  Tensor dhidden = shared_down_->backward(dout.view(out_shape), batch, saved.children.at(kSharedDownChild));
  dout = Tensor();
  ops::swiglu_backward(gate_up, dhidden, gate_up);  // (..., Fs / tp) -> (..., 2Fs / tp)
  const Tensor dx_shared = shared_gate_up_->backward(gate_up, batch, saved.children.at(kSharedUpChild));  // (..., C)
  ops::add(dx, dx_shared.view({N, C}), dx);
  Tensor dgate_x = dgate;  // (N, 1) in the compute dtype, as the gate's products take it
  if (dy.dtype() != DType::F32) {
    dgate_x = Tensor::empty({N, 1}, dy.dtype(), dev, name() + " shared expert gate grad (compute dtype)");
    ops::cast(dgate, dgate_x);
  }
  ops::matmul(dgate_x, shared_gate_->value, dx, false, false, 1.0f);
  if (shared_gate_->trainable) ops::linear_weight_grad(dgate_x, x, shared_gate_->grad, Tensor());
  if (shared_gate_lora_)
    shared_gate_lora_->backward(saved.tensors.at(kSharedRows), {saved.tensors.at(kSharedGateLora)}, dgate_x, dx, batch);
}

Tensor MoeMlp::products(const Tensor& x, const std::vector<int64_t>& rows, Saved& saved) {
  const int64_t R = x.dim(0), C = x.dim(1), F = shape_.intermediate;
  Device& dev = x.device();
  Tensor gate_up = Tensor::empty({R, 2 * F}, x.dtype(), dev, name() + " expert gate_up");  // (R, 2F)
  Tensor hidden = Tensor::empty({R, F}, x.dtype(), dev, name() + " expert hidden");        // (R, F)
  Tensor out = Tensor::empty({R, C}, x.dtype(), dev, name() + " expert outputs");          // (R, C)
  ops::grouped_matmul(x, gate_up_->value, gate_up, rows, true);
  if (gate_up_lora_) saved.tensors[kGateUpLora] = gate_up_lora_->forward(x, rows, gate_up);
  ops::swiglu_forward(gate_up, hidden);
  ops::grouped_matmul(hidden, down_->value, out, rows, true);
  if (down_lora_) saved.tensors[kDownLora] = down_lora_->forward(hidden, rows, out);
  saved.tensors[kGateUp] = gate_up;
  saved.tensors[kHidden] = hidden;
  return out;
}

Tensor MoeMlp::products_backward(const Tensor& dy, const std::vector<int64_t>& rows, const Tensor& x,
                                 const Saved& saved) {
  const Tensor gate_up = saved.tensors.at(kGateUp), hidden = saved.tensors.at(kHidden);
  const int64_t R = dy.dim(0), C = dy.dim(1), F = shape_.intermediate;
  Device& dev = dy.device();
  // down, SwiGLU (in place over gate_up), gate_up; each adapter's part added to its input's gradient.
  Tensor dhidden = Tensor::empty({R, F}, dy.dtype(), dev, name() + " expert hidden grad");  // (R, F)
  ops::grouped_matmul(dy, down_->value, dhidden, rows, false);
  if (down_->trainable) ops::grouped_weight_grad(dy, hidden, down_->grad, rows);
  if (down_lora_) down_lora_->backward(hidden, saved.tensors.at(kDownLora), dy, rows, dhidden);
  ops::swiglu_backward(gate_up, dhidden, gate_up);
  Tensor dx = Tensor::empty({R, C}, dy.dtype(), dev, name() + " routed inputs grad");  // (R, C)
  ops::grouped_matmul(gate_up, gate_up_->value, dx, rows, false);
  if (gate_up_->trainable) ops::grouped_weight_grad(gate_up, x, gate_up_->grad, rows);
  if (gate_up_lora_) gate_up_lora_->backward(x, saved.tensors.at(kGateUpLora), gate_up, rows, dx);
  return dx;
}

Tensor MoeMlp::experts_backward(const Tensor& doutputs, Saved& saved) {
  const Tensor x = saved.tensors.at(kRouted);
  const int64_t M = doutputs.dim(0), C = doutputs.dim(1), E = shape_.experts;
  if (!slot_.active())
    return products_backward(doutputs, ops::moe_expert_rows(saved.tensors.at(kOffsets), M), x, saved);
  Device& dev = doutputs.device();
  const ExpertRoute route = route_of(saved.tensors.at(kSlotOffsets), slot_.size, slot_.rank, E, M);
  const int64_t R = route.received();
  Tensor arrived = Tensor::empty({R, C}, doutputs.dtype(), dev, name() + " output grads from the slots");
  slot_.exchange->rows(doutputs, route.send, arrived, route.recv);
  Tensor dy = Tensor::empty({R, C}, doutputs.dtype(), dev, name() + " this slot's expert output grads");
  ops::moe_gather(arrived, saved.tensors.at(kOrder), dy);
  arrived = Tensor();
  const Tensor dx = products_backward(dy, route.per_expert, x, saved);
  Tensor leaving = Tensor::empty({R, C}, doutputs.dtype(), dev, name() + " input grads to the slots");
  ops::moe_gather(dx, saved.tensors.at(kInverse), leaving);
  Tensor drouted = Tensor::empty({M, C}, doutputs.dtype(), dev, name() + " routed inputs grad");  // (M, C)
  slot_.exchange->rows(leaving, route.recv, drouted, route.send);
  return drouted;
}

Tensor MoeMlp::backward(const Tensor& dy, const Batch& batch, Saved& saved) {
  const Tensor x = saved.tensors.at(kInput), probs = saved.tensors.at(kProbs), choices = saved.tensors.at(kChoices);
  const Tensor weights = saved.tensors.at(kWeights), rows = saved.tensors.at(kRows);
  const Tensor outputs = saved.tensors.at(kOutputs);
  const int64_t N = x.dim(0), C = x.dim(1), E = shape_.experts;
  const int k = shape_.top_k;
  const int64_t M = N * k;
  Device& dev = dy.device();
  // The combine: each routed row's gradient and each weight's.
  Tensor doutputs = Tensor::empty({M, C}, dy.dtype(), dev, name() + " expert outputs grad");  // (M, C)
  Tensor dweights = Tensor::empty({N, k}, DType::F32, dev, name() + " expert weights grad");  // (N, k)
  ops::moe_combine_backward(dy.view({N, C}), outputs, rows, weights, doutputs, dweights);
  const Tensor drouted = experts_backward(doutputs, saved);  // (M, C)
  doutputs = Tensor();
  Tensor dx = Tensor::zeros({N, C}, dy.dtype(), dev, name() + " input grad");  // (N, C)
  ops::moe_combine(drouted, rows, Tensor(), dx);
  if (shared_gate_) shared_backward(dy.view({N, C}), dx, batch, saved);
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
