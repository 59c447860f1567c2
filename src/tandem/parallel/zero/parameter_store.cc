#include "tandem/parallel/zero/parameter_store.h"

#include <algorithm>
#include <map>
#include <vector>

#include "tandem/ops/ops.h"

namespace tandem::parallel {

struct ParameterStore::Unit {
  std::vector<nn::Parameter*> params;
  std::vector<int64_t> offsets;  // of each parameter in the unit's flat buffer
  int64_t numel = 0;             // P_u
  int64_t shard = 0;             // ceil(P_u / dp): the padded buffer is shard * dp
  Tensor values;      // (shard * dp) compute dtype, what layers read; only around forward/backward at stage 3
  Tensor grads;       // (shard * dp) fp32 gradients; only during backward at stages 2 and 3
  Tensor master;      // fp32 values the optimizer updates: (shard * dp) at stage 0, (shard) owned at 1-3; the
                      // same memory as `values` (or its owned slice) when computing in fp32 at stages 0-2
  Tensor grad_shard;  // (shard) owned, reduced fp32 gradients (stages 1-3)
  std::string label;  // "layer 3 (blocks.2)" for allocation names
  // Tied parameters (nn::Parameter::replica): such a unit holds one tied parameter. `aliases` are the other uses
  // of it on this rank, pointed at the same memory; `tied_remote`: the other use sits on another pipeline stage,
  // which keeps a copy, and the two gradients are summed every step over the tied group.
  std::vector<nn::Parameter*> aliases;
  bool tied_remote = false;
};

ParameterStore::ParameterStore(nn::Model& model, std::vector<size_t> layers, int zero_stage, comm::Communicator& dp,
                               Device& device, uint64_t seed, const config::OptimizerConfig& adamw, DType compute,
                               comm::Communicator* tied)
    : model_(model), stage_(dp.size() > 1 ? zero_stage : 0), compute_(compute), dp_(dp), tied_(tied), device_(device) {
  // With one replica there is nothing to shard: every stage is stage 0.
  TANDEM_CHECK(zero_stage >= 0 && zero_stage <= 3, "ZeRO stage ", zero_stage);
  units_of_layer_.assign(model.layers().size(), {});
  held_.assign(model.layers().size(), false);
  for (size_t layer : layers) held_.at(layer) = true;
  // Tied names, and whether this rank holds both uses of each.
  std::map<std::string, int> uses_held;
  for (const nn::Parameter* r : model.replicas()) uses_held[r->name] = 0;
  for (size_t layer : layers)
    for (const nn::Parameter* p : model.layers()[layer]->parameters())
      if (uses_held.count(p->name)) ++uses_held[p->name];
  std::map<std::string, int> tied_unit;  // by name: the unit of a tied parameter built on this rank
  std::vector<optim::Segment> segments;
  for (size_t layer : layers) {
    const std::string& name = model.layers()[layer]->name();
    const std::string label = "layer " + std::to_string(layer) + (name.empty() ? "" : " (" + name + ")");
    std::vector<nn::Parameter*> plain;
    for (nn::Parameter* p : model.layers()[layer]->parameters()) {
      if (!uses_held.count(p->name)) {
        plain.push_back(p);
        continue;
      }
      // A tied parameter is a unit of its own, so the copies on two stages shard alike; one unit when this rank
      // holds both uses.
      const auto it = tied_unit.find(p->name);
      if (it != tied_unit.end()) {
        Unit& u = *units_[static_cast<size_t>(it->second)];
        u.aliases.push_back(p);
        p->value = u.params[0]->value;
        p->grad = u.params[0]->grad;
        units_of_layer_[layer].push_back(it->second);
        continue;
      }
      tied_unit[p->name] = add_unit(layer, {p}, label + " '" + p->name + "'", seed, segments);
      units_.back()->tied_remote = uses_held.at(p->name) == 1;
      TANDEM_CHECK(!units_.back()->tied_remote || tied_, "'", p->name,
                   "' is tied across pipeline stages but the engine gave the store no tied group");
    }
    if (!plain.empty()) add_unit(layer, plain, label, seed, segments);
  }
  {
    PurposeScope as_optimizer(device_, MemoryPurpose::Optimizer);
    adamw_ = std::make_unique<optim::AdamW>(std::move(segments), adamw);
  }
  refresh_values();
}

int ParameterStore::add_unit(size_t layer, std::vector<nn::Parameter*> params, std::string label, uint64_t seed,
                             std::vector<optim::Segment>& segments) {
  const int dp_size = dp_.size(), dp_rank = dp_.rank();
  auto u = std::make_unique<Unit>();
  u->params = std::move(params);
  u->label = std::move(label);
  for (nn::Parameter* p : u->params) {
    u->offsets.push_back(u->numel);
    u->numel += shape_numel(p->shape);
  }
  u->shard = (u->numel + dp_size - 1) / dp_size;
  const int64_t s0 = dp_rank * u->shard, s1 = s0 + u->shard;

  // The fp32 master, initialised from the seed by logical element: the whole buffer at stage 0, the owned
  // shard otherwise.
  const int64_t m0 = stage_ == 0 ? 0 : s0, mn = stage_ == 0 ? u->shard * dp_size : u->shard;
  const bool alias = compute_ == DType::F32 && stage_ < 3;
  PurposeScope as_parameters(device_, MemoryPurpose::Parameters);
  if (stage_ < 3) {
    u->values = Tensor::zeros({u->shard * dp_size}, compute_, device_, u->label + " parameters");
    point_values(*u, u->values);
  }
  u->master = alias ? u->values.flat_slice(m0, mn, {mn})
                    : Tensor::zeros({mn}, DType::F32, device_, u->label + " fp32 master parameters");
  for (size_t i = 0; i < u->params.size(); ++i) {
    const int64_t a = std::max(u->offsets[i], m0),
                  b = std::min(u->offsets[i] + shape_numel(u->params[i]->shape), m0 + mn);
    if (a < b)
      nn::initialize_parameter(*u->params[i], u->master.flat_slice(a - m0, b - a, {b - a}), seed, a - u->offsets[i]);
  }
  if (stage_ == 3) release_values(*u);
  PurposeScope as_gradients(device_, MemoryPurpose::Gradients);
  if (stage_ <= 1) {
    u->grads = Tensor::zeros({u->shard * dp_size}, DType::F32, device_, u->label + " gradients");
    point_grads(*u, u->grads);
  }
  if (stage_ >= 1) u->grad_shard = Tensor::zeros({u->shard}, DType::F32, device_, u->label + " gradient shard");

  for (size_t i = 0; i < u->params.size(); ++i) {
    nn::Parameter* p = u->params[i];
    const int64_t off = u->offsets[i], n = shape_numel(p->shape);
    if (stage_ == 0) {
      segments.push_back({p->name, u->master.flat_slice(off, n, {n}), u->grads.flat_slice(off, n, {n}), p->decay, 0});
      segment_param_.push_back(p);
    } else {
      const int64_t a = std::max(off, s0), b = std::min(off + n, s1);
      if (a < b) {
        segments.push_back({p->name, u->master.flat_slice(a - s0, b - a, {b - a}),
                            u->grad_shard.flat_slice(a - s0, b - a, {b - a}), p->decay, a - off});
        segment_param_.push_back(p);
      }
    }
  }
  const int index = static_cast<int>(units_.size());
  units_of_layer_[layer].push_back(index);
  units_.push_back(std::move(u));
  return index;
}

ParameterStore::~ParameterStore() = default;

const std::vector<int>& ParameterStore::units_of(size_t layer) const {
  TANDEM_CHECK(layer < held_.size() && held_[layer], "layer ", layer, " is not held here");
  return units_of_layer_[layer];
}

void ParameterStore::point_values(Unit& u, const Tensor& full) {
  for (size_t i = 0; i < u.params.size(); ++i) {
    nn::Parameter* p = u.params[i];
    p->value = full.defined() ? full.flat_slice(u.offsets[i], shape_numel(p->shape), p->shape) : Tensor();
  }
  for (nn::Parameter* a : u.aliases) a->value = u.params[0]->value;
}

void ParameterStore::point_grads(Unit& u, const Tensor& full) {
  for (size_t i = 0; i < u.params.size(); ++i) {
    nn::Parameter* p = u.params[i];
    p->grad = full.defined() ? full.flat_slice(u.offsets[i], shape_numel(p->shape), p->shape) : Tensor();
  }
  for (nn::Parameter* a : u.aliases) a->grad = u.params[0]->grad;
}

void ParameterStore::gather_values(Unit& u) {
  if (u.values.defined()) return;
  PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
  u.values = Tensor::empty({u.shard * dp_.size()}, compute_, device_, u.label + " gathered parameters");
  // Gather in the compute dtype: half the bytes of the fp32 master when computing in bf16 or f16.
  const Tensor own = u.values.flat_slice(dp_.rank() * u.shard, u.shard, {u.shard});
  ops::cast(u.master, own);
  dp_.all_gather(own, u.values);
  point_values(u, u.values);
}

void ParameterStore::refresh_values() {
  if (stage_ == 3) return;  // gathered from the master when needed
  std::vector<std::unique_ptr<comm::Request>> pending;
  for (auto& u : units_) {
    if (stage_ == 0) {
      if (compute_ != DType::F32) ops::cast(u->master, u->values);
      continue;
    }
    const Tensor own = u->values.flat_slice(dp_.rank() * u->shard, u->shard, {u->shard});
    if (compute_ != DType::F32) ops::cast(u->master, own);
    pending.push_back(dp_.all_gather_async(own, u->values));
  }
  for (auto& r : pending) r->wait();
}

void ParameterStore::release_values(Unit& u) {
  point_values(u, Tensor());
  u.values = Tensor();
}

void ParameterStore::begin_step() {
  for (auto& u : units_) {
    if (u->grads.defined()) u->grads.fill_zero();
    if (u->grad_shard.defined()) u->grad_shard.fill_zero();
  }
}

void ParameterStore::before_forward(size_t layer) {
  if (stage_ == 3)
    for (int i : units_of(layer)) gather_values(*units_[static_cast<size_t>(i)]);
}

void ParameterStore::after_forward(size_t layer) {
  if (stage_ == 3)
    for (int i : units_of(layer)) release_values(*units_[static_cast<size_t>(i)]);
}

void ParameterStore::before_backward(size_t layer) {
  for (int i : units_of(layer)) {
    Unit& u = *units_[static_cast<size_t>(i)];
    if (stage_ == 3) gather_values(u);
    if (stage_ >= 2) {
      PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
      u.grads = Tensor::zeros({u.shard * dp_.size()}, DType::F32, device_, u.label + " gradients");
      point_grads(u, u.grads);
    }
  }
}

void ParameterStore::after_backward(size_t layer) {
  for (int i : units_of(layer)) {
    Unit& u = *units_[static_cast<size_t>(i)];
    if (stage_ >= 2) {
      PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
      Tensor reduced = Tensor::empty({u.shard}, DType::F32, device_, u.label + " reduced gradient");  // (shard)
      dp_.reduce_scatter(u.grads, reduced);
      ops::axpy(1.0f, reduced, u.grad_shard);
      point_grads(u, Tensor());
      u.grads = Tensor();
    }
    if (stage_ == 3) release_values(u);
  }
}

void ParameterStore::reduce_gradients() {
  if (stage_ >= 2 || (stage_ == 0 && dp_.size() == 1)) return;
  // Start every unit's reduction, then wait: the transfers queue back to back.
  std::vector<std::unique_ptr<comm::Request>> pending;
  for (auto& u : units_) {
    if (stage_ == 0)
      pending.push_back(dp_.all_reduce_async(u->grads, comm::ReduceOp::Sum));
    else
      pending.push_back(dp_.reduce_scatter_async(u->grads, u->grad_shard, comm::ReduceOp::Sum));
  }
  for (auto& r : pending) r->wait();
}

void ParameterStore::tie_gradients() {
  // The gradient the optimizer reads: the full buffer at stage 0, the owned reduced shard at 1-3.
  for (auto& u : units_)
    if (u->tied_remote) tied_->all_reduce(stage_ == 0 ? u->grads : u->grad_shard, comm::ReduceOp::Sum);
}

double ParameterStore::grad_sum_of_squares(bool count_replicated) const {
  if (stage_ == 0 && dp_.rank() != 0) return 0.0;  // every dp rank holds the same reduced gradients
  std::vector<Tensor> counted;
  const auto& segments = adamw_->segments();
  // A replica's gradient is its original's (summed between them): counted once, where the original is.
  for (size_t i = 0; i < segments.size(); ++i) {
    const nn::Parameter& p = *segment_param_[i];
    if (!p.replica && (count_replicated || p.shard.sharded())) counted.push_back(segments[i].grad);
  }
  // One wait for the device, not one per segment; the segments' sums are added in this order as before.
  return ops::sum_squares_total(counted);
}

void ParameterStore::optimizer_step(float lr, float grad_scale) {
  adamw_->step(lr, grad_scale);
  refresh_values();
}

void ParameterStore::visit_owned(
    const std::function<void(const nn::Parameter&, int64_t, const Tensor&, const Tensor&, const Tensor&)>& fn) {
  const auto& segs = adamw_->segments();
  for (size_t i = 0; i < segs.size(); ++i)
    fn(*segment_param_[i], segs[i].offset, segs[i].value, adamw_->exp_avg()[i], adamw_->exp_avg_sq()[i]);
}

void ParameterStore::values_changed() { refresh_values(); }

void ParameterStore::visit_full_values(const std::function<void(const nn::Parameter&, const Tensor&)>& fn) {
  for (auto& u : units_) {
    if (stage_ == 3) gather_values(*u);
    for (nn::Parameter* p : u->params)
      if (!p->replica) fn(*p, p->value);
    if (stage_ == 3) release_values(*u);
  }
}

}  // namespace tandem::parallel
