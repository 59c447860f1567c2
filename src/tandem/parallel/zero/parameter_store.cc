#include "tandem/parallel/zero/parameter_store.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "tandem/core/dtype.h"
#include "tandem/ops/ops.h"

namespace tandem::parallel {

bool ratio_offloads(int64_t seen_through_unit, int64_t held, double ratio) {
  return static_cast<double>(seen_through_unit) > (1.0 - ratio) * static_cast<double>(held);
}

double ratio_keeping_first(const std::vector<int64_t>& layer_params, size_t kept) {
  if (kept >= layer_params.size()) return 1;
  int64_t total = 0, first = 0;
  for (size_t i = 0; i < layer_params.size(); ++i) (i < kept ? first : total) += layer_params[i];
  total += first;
  const int64_t through_next = first + layer_params[kept];
  const auto keeps = [&](double r) {
    return r > 0 && r <= 1 && !ratio_offloads(first, total, r) && ratio_offloads(through_next, total, r);
  };
  // Half way into the next layer, then its four-digit floor where the rule still keeps the same layers.
  const double exact =
      1.0 - (static_cast<double>(first) + 0.5 * static_cast<double>(layer_params[kept])) / static_cast<double>(total);
  const double rounded = std::floor(exact * 1e4) / 1e4;
  return keeps(rounded) ? rounded : keeps(exact) ? exact : 1;
}

ParameterStore::ParameterStore(nn::Model& model, std::vector<size_t> layers, int zero_stage, comm::Communicator& dp,
                               Device& device, uint64_t seed, const spec::OptimizerConfig& adamw, DType compute,
                               comm::Communicator* tied, const OffloadOptions& offload)
    : model_(model),
      stage_(dp.size() > 1 ? zero_stage : 0),
      compute_(compute),
      dp_(dp),
      tied_(tied),
      device_(device),
      host_(offload.host),
      param_offload_(offload.param.enabled()),
      micro_batches_(offload.micro_batches),
      swap_(offload.host, compute),
      upload_piece_(offload.optimizer.upload_piece),
      timeline_(device) {
  TANDEM_CHECK(upload_piece_ > 0, "offload: upload pieces of ", upload_piece_, " elements");
  // With one replica there is nothing to shard: every stage is stage 0.
  TANDEM_CHECK(zero_stage >= 0 && zero_stage <= 3, "ZeRO stage ", zero_stage);
  TANDEM_CHECK(!offload.optimizer.enabled() || host_, "offload_optimizer without host memory to offload to");
  TANDEM_CHECK(!param_offload_ || offload.optimizer.enabled(), "offload_param needs offload_optimizer");
  swap_optimizer_ = offload.optimizer.device == spec::OffloadDevice::Nvme;
  swap_param_ = offload.param.device == spec::OffloadDevice::Nvme;
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
  // offload_optimizer.ratio: the last layers' units are offloaded (ratio_offloads).
  int64_t held_parameters = 0, seen_parameters = 0;
  for (size_t layer : layers)
    for (const nn::Parameter* p : model.layers()[layer]->parameters()) held_parameters += shape_numel(p->shape);
  const auto offload_next = [&](const std::vector<nn::Parameter*>& params, bool tied_remote) {
    for (const nn::Parameter* p : params) seen_parameters += shape_numel(p->shape);
    return offload.optimizer.enabled() && !tied_remote &&
           ratio_offloads(seen_parameters, held_parameters, offload.optimizer.ratio);
  };
  for (size_t layer : layers) {
    const std::string& name = model.layers()[layer]->name();
    const std::string label = "layer " + std::to_string(layer) + (name.empty() ? "" : " (" + name + ")");
    std::vector<nn::Parameter*> plain, frozen;
    for (nn::Parameter* p : model.layers()[layer]->parameters()) {
      if (!uses_held.count(p->name)) {
        (p->trainable ? plain : frozen).push_back(p);
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
      const bool tied_remote = uses_held.at(p->name) == 1;
      TANDEM_CHECK(!tied_remote || tied_, "'", p->name,
                   "' is tied across pipeline stages but the engine gave the store no tied group");
      tied_unit[p->name] = add_unit(layer, {p}, label + " '" + p->name + "'", seed, offload_next({p}, tied_remote),
                                    uses_held.at(p->name), segments);
      units_.back()->tied_remote = tied_remote;
    }
    if (!plain.empty()) add_unit(layer, plain, label, seed, offload_next(plain, false), 1, segments);
    if (!frozen.empty()) {
      for (const nn::Parameter* p : frozen) seen_parameters += shape_numel(p->shape);
      add_unit(layer, frozen, label + " frozen", seed, /*offload=*/false, 1, segments);
    }
  }
  {
    PurposeScope as_optimizer(device_, MemoryPurpose::Optimizer);
    std::optional<PurposeScope> host_as_optimizer;
    if (host_) host_as_optimizer.emplace(*host_, MemoryPurpose::Optimizer);
    adamw_ = std::make_unique<optim::AdamW>(std::move(segments), adamw);
  }
  if (swap_bytes() > 0) make_swap(offload.optimizer, offload.param, seed);
  int64_t largest_staged = 0;
  for (const auto& u : units_)
    if (u->staged()) largest_staged = std::max(largest_staged, u->owned_grads.numel());
  updater_ = std::make_unique<OffloadUpdater>(
      OffloadUpdater::Setup{device_, host_, *adamw_, segment_start_, swap_, timeline_, compute_, upload_piece_,
                            dp_.rank(), dp_.size(), values_transient(), param_offload_},
      largest_staged);
  refresh_values();
}

int ParameterStore::add_unit(size_t layer, std::vector<nn::Parameter*> params, std::string label, uint64_t seed,
                             bool offload, int uses, std::vector<optim::Segment>& segments) {
  const int dp_size = dp_.size(), dp_rank = dp_.rank();
  auto u = std::make_unique<Unit>();
  u->params = std::move(params);
  u->uses = uses;
  u->label = std::move(label);
  u->state = !offload ? Where::Device : swap_optimizer_ ? Where::SwapFile : Where::Host;
  offloaded_units_ += offload;
  // The memory the optimizer's state of this unit is made in: host memory when offloaded (unless swapped: made in the
  // swap file).
  Device& state = offload ? host() : device_;
  std::optional<PurposeScope> host_scope;
  if (host_) host_scope.emplace(*host_, MemoryPurpose::Parameters);
  for (nn::Parameter* p : u->params) {
    u->offsets.push_back(u->numel);
    u->numel += shape_numel(p->shape);
  }
  u->shard = (u->numel + dp_size - 1) / dp_size;
  const int64_t s0 = dp_rank * u->shard, s1 = s0 + u->shard;
  u->frozen = !u->params.front()->trainable;
  for (const nn::Parameter* p : u->params)
    TANDEM_CHECK(p->trainable != u->frozen, u->label, ": trainable and frozen parameters in one unit");
  if (u->frozen) {
    add_frozen_values(*u, seed);
    const int index = static_cast<int>(units_.size());
    units_of_layer_[layer].push_back(index);
    units_.push_back(std::move(u));
    return index;
  }

  // The fp32 master, initialised from the seed by logical element: the whole buffer at stage 0, the owned
  // shard otherwise (with one replica the two are the same).
  const int64_t m0 = stage_ == 0 ? 0 : s0, mn = stage_ == 0 ? u->shard * dp_size : u->shard;
  const bool alias = compute_ == DType::F32 && !values_transient() && !offload;
  PurposeScope as_parameters(device_, MemoryPurpose::Parameters);
  if (!values_transient()) {
    u->full_values = Tensor::zeros({u->shard * dp_size}, compute_, device_, u->label + " parameters");
    point_values(*u, u->full_values);
  }
  if (u->state == Where::SwapFile) {
    // Its master and moments go to the swap file (make_swap draws the master there).
    swap_.place_state(*u, mn);
  } else {
    u->master = alias ? u->full_values.flat_slice(m0, mn, {mn})
                      : Tensor::zeros({mn}, DType::F32, state, u->label + " fp32 master parameters");
  }
  for (size_t i = 0; i < u->params.size() && u->state != Where::SwapFile; ++i) {
    const int64_t a = std::max(u->offsets[i], m0),
                  b = std::min(u->offsets[i] + shape_numel(u->params[i]->shape), m0 + mn);
    if (a < b) draw_initial(*u->params[i], u->master.flat_slice(a - m0, b - a, {b - a}), seed, a - u->offsets[i]);
  }
  if (offload) {
    // The owned compute-dtype values: with offload_param on the host or in its swap file, the device's only copy
    // made before each gather; otherwise on the device, with a copy on the host only when that is free (the fp32
    // master itself, in host memory).
    const bool master_is_values = compute_ == DType::F32 && u->state == Where::Host;
    u->owned_values = param_offload_ ? (swap_param_ ? Where::SwapFile : Where::Host)
                                     : (master_is_values ? Where::Host : Where::Device);
    if (u->owned_values == Where::SwapFile) {
      swap_.place_values(*u, mn);
    } else if (!u->staged()) {
      u->owned_values_host = compute_ == DType::F32
                                 ? u->master
                                 : Tensor::zeros({mn}, compute_, host(), u->label + " parameters on the host");
    }
    if (values_transient() && !param_offload_)
      u->owned_values_device = Tensor::zeros({mn}, compute_, device_, u->label + " parameter shard");
  }
  if (values_transient()) release_values(*u);
  PurposeScope as_gradients(device_, MemoryPurpose::Gradients);
  if (host_) host_scope.emplace(*host_, MemoryPurpose::Gradients);
  if (stage_ <= 1 && !offload) {
    u->full_grads = Tensor::zeros({u->shard * dp_size}, DType::F32, device_, u->label + " gradients");
    point_grads(*u, u->full_grads);
  }
  if (offload && stage_ <= 1 && micro_batches_ * u->uses > 1) {
    // The step's running sum; the last micro-batch's reduced sum lands in its owned slice, which the host AdamW
    // reads before the next step's first copy down overwrites it: one fp32 gradient on the host, not two.
    u->full_grads_host = Tensor::zeros({u->shard * dp_size}, DType::F32, host(), u->label + " gradients on the host");
    u->owned_grads = u->full_grads_host.flat_slice(m0, mn, {mn});
  } else if (stage_ >= 1 || offload) {
    u->owned_grads = Tensor::zeros({mn}, DType::F32, state, u->label + " gradient shard");
  }

  u->first_segment = segments.size();
  for (size_t i = 0; i < u->params.size(); ++i) {
    nn::Parameter* p = u->params[i];
    const int64_t off = u->offsets[i], n = shape_numel(p->shape);
    if (stage_ == 0 && !offload) {
      segments.push_back(
          {p->name, u->master.flat_slice(off, n, {n}), u->full_grads.flat_slice(off, n, {n}), p->decay, 0});
      segment_param_.push_back(p);
      segment_start_.push_back(off);
    } else {
      const int64_t a = std::max(off, s0), b = std::min(off + n, s1);
      if (a < b) {
        // A swapped unit's segments hold no value: the master is paged in from the swap file for each use.
        segments.push_back({p->name,
                            u->state == Where::SwapFile ? Tensor() : u->master.flat_slice(a - s0, b - a, {b - a}),
                            u->owned_grads.flat_slice(a - s0, b - a, {b - a}), p->decay, a - off});
        segment_param_.push_back(p);
        segment_start_.push_back(a - s0);
      }
    }
  }
  u->end_segment = segments.size();
  const int index = static_cast<int>(units_.size());
  units_of_layer_[layer].push_back(index);
  units_.push_back(std::move(u));
  return index;
}

ParameterStore::~ParameterStore() {
  // A destructor cannot report: the update's and the download's device go away with the engine anyway.
  try {
    finish_update();
  } catch (const std::exception&) {
  }
  try {
    finish_download();
  } catch (const std::exception&) {
  }
  updater_->stop();
}

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
  if (u.full_values.defined()) return;
  PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
  u.full_values = Tensor::empty({u.shard * dp_.size()}, compute_, device_, u.label + " gathered parameters");
  if (u.frozen) {
    dp_.all_gather(u.owned_values_device, u.full_values);  // already in the compute dtype
    point_values(u, u.full_values);
    return;
  }
  // Gather in the compute dtype: half the bytes of the fp32 master when computing in bf16 or f16.
  const Tensor own = u.full_values.flat_slice(dp_.rank() * u.shard, u.shard, {u.shard});
  if (!u.offloaded()) {
    ops::cast(u.master, own);
  } else if (param_offload_) {
    // Up from the host into memory the device may still be reading for an earlier layer: after its queued work. A
    // swapped shard is read into the one host buffer, which the next read reuses: the copy is waited for.
    wait_updated(u);
    const Tensor source = host_values_for_gather(u);
    const uint64_t ticket = device_.copy_from_host_async(own.raw(), source.raw(), own.nbytes(), device_.fence());
    device_.device_waits(ticket);
    if (u.owned_values == Where::SwapFile) device_.host_waits(ticket);
  } else {
    wait_updated(u);
    device_.device_waits(u.upload);
    own.copy_from(u.owned_values_device);
  }
  if (dp_.size() > 1) dp_.all_gather(own, u.full_values);
  point_values(u, u.full_values);
}

void ParameterStore::refresh_values(bool offloaded_too) {
  if (offloaded_too) finish_update();
  std::vector<std::unique_ptr<comm::Request>> pending;
  const uint64_t fence = offloaded() && offloaded_too ? device_.fence() : 0;
  for (auto& u : units_) {
    if (u->frozen) continue;  // never updated (write_frozen gathers what it writes)
    if (u->offloaded()) {
      if (!offloaded_too) continue;
      updater_->upload_current(*u, fence);
      continue;
    }
    if (values_transient()) continue;  // gathered from the master when needed
    if (stage_ == 0) {
      if (compute_ != DType::F32) ops::cast(u->master, u->full_values);
      continue;
    }
    const Tensor own = u->full_values.flat_slice(dp_.rank() * u->shard, u->shard, {u->shard});
    if (compute_ != DType::F32) ops::cast(u->master, own);
    pending.push_back(dp_.all_gather_async(own, u->full_values));
  }
  for (auto& r : pending) r->wait();
}

void ParameterStore::release_values(Unit& u) {
  point_values(u, Tensor());
  u.full_values = Tensor();
}

void ParameterStore::begin_step(std::optional<UpdateInBackward> in_backward) {
  if (offloaded() && in_backward) {
    // The step is counted now: the offloaded units' updates start before optimizer_step.
    adamw_->begin_step();
    in_backward_ = in_backward;
  }
  timeline_.begin_step(model_.layers().size());
  for (auto& u : units_) {
    u->arrived = 0;  // an offloaded unit's first gradient of the step is copied to the host, not added
    u->queued = false;
    if (u->offloaded()) continue;
    if (u->full_grads.defined()) u->full_grads.fill_zero();
    if (u->owned_grads.defined()) u->owned_grads.fill_zero();
  }
}

void ParameterStore::before_forward(size_t layer) {
  if (timeline_.in_step_after()) timeline_.layer_started(layer);
  for (int i : units_of(layer)) {
    Unit& u = *units_[static_cast<size_t>(i)];
    use_values(u);
  }
}

void ParameterStore::use_values(Unit& u) {
  if (values_transient())
    gather_values(u);
  else if (u.offloaded())
    make_current(u);
}

void ParameterStore::after_forward(size_t layer) {
  if (values_transient())
    for (int i : units_of(layer)) release_values(*units_[static_cast<size_t>(i)]);
  if (timeline_.in_step_after()) timeline_.layer_ended(layer, "forward " + model_.layers()[layer]->name());
}

void ParameterStore::before_backward(size_t layer) {
  if (timeline_.in_recorded_step()) timeline_.layer_started(layer);
  for (int i : units_of(layer)) {
    Unit& u = *units_[static_cast<size_t>(i)];
    use_values(u);
    if (u.offloaded()) {
      prepare_gradient(u);
    } else if (stage_ >= 2 && !u.frozen) {
      PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
      u.full_grads = Tensor::zeros({u.shard * dp_.size()}, DType::F32, device_, u.label + " gradients");
      point_grads(u, u.full_grads);
    }
  }
}

void ParameterStore::after_backward(size_t layer) {
  for (int i : units_of(layer)) {
    Unit& u = *units_[static_cast<size_t>(i)];
    if (u.offloaded()) {
      download_gradient(u);
    } else if (stage_ >= 2 && !u.frozen) {
      PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
      Tensor reduced = Tensor::empty({u.shard}, DType::F32, device_, u.label + " reduced gradient");  // (shard)
      dp_.reduce_scatter(u.full_grads, reduced);
      ops::axpy(1.0f, reduced, u.owned_grads);
      point_grads(u, Tensor());
      u.full_grads = Tensor();
    }
    if (values_transient()) release_values(u);
  }
  if (timeline_.in_recorded_step()) timeline_.layer_ended(layer, "backward " + model_.layers()[layer]->name());
}

void ParameterStore::reduce_gradients() {
  finish_download();
  if (stage_ >= 2 || (stage_ == 0 && dp_.size() == 1)) return;
  // Start every unit's reduction, then wait: the transfers queue back to back. Offloaded units reduced theirs as
  // their backward ended.
  std::vector<std::unique_ptr<comm::Request>> pending;
  for (auto& u : units_) {
    if (u->offloaded() || u->frozen) continue;
    if (stage_ == 0)
      pending.push_back(dp_.all_reduce_async(u->full_grads, comm::ReduceOp::Sum));
    else
      pending.push_back(dp_.reduce_scatter_async(u->full_grads, u->owned_grads, comm::ReduceOp::Sum));
  }
  for (auto& r : pending) r->wait();
}

void ParameterStore::tie_gradients() {
  // The gradient the optimizer reads: the full buffer at stage 0, the owned reduced shard at 1-3.
  for (auto& u : units_)
    if (u->tied_remote && !u->frozen)
      tied_->all_reduce(stage_ == 0 ? u->full_grads : u->owned_grads, comm::ReduceOp::Sum);
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
  // One wait for the device, not one per segment; the segments' sums are added in this order. With part of the
  // state offloaded the segments sit on two devices: a run on a host is added segment by segment (no wait, and the
  // same additions in the same order as one call over everything, so offload keeps the CPU backend's bits); a run on
  // a GPU is one call whose total is then added (rounding of its last bits apart).
  if (std::all_of(counted.begin(), counted.end(),
                  [&](const Tensor& t) { return &t.device() == &counted.front().device(); }))
    return ops::sum_squares_total(counted);
  double total = 0;
  for (size_t first = 0; first < counted.size();) {
    size_t end = first;
    while (end < counted.size() && &counted[end].device() == &counted[first].device()) ++end;
    if (counted[first].device().kind() == DeviceKind::Cpu)
      for (size_t i = first; i < end; ++i) total += ops::sum_squares(counted[i]);
    else
      total += ops::sum_squares_total(std::vector<Tensor>(counted.begin() + first, counted.begin() + end));
    first = end;
  }
  return total;
}

void ParameterStore::optimizer_step(float lr, float grad_scale) {
  if (in_backward_) {
    TANDEM_CHECK(in_backward_->lr == lr && in_backward_->grad_scale == grad_scale,
                 "optimizer_step: the update that started in the backward was for lr ", in_backward_->lr,
                 " and gradient scale ", in_backward_->grad_scale, ", not ", lr, " and ", grad_scale);
  } else {
    adamw_->begin_step();
  }
  if (state_read_ != 0) device_.device_waits(std::exchange(state_read_, 0));
  for (const auto& u : units_)
    if (!u->offloaded()) adamw_->update(u->first_segment, u->end_segment, lr, grad_scale);
  refresh_values(/*offloaded_too=*/false);
  if (offloaded()) start_update(lr, grad_scale);  // each offloaded unit's values go up as its update finishes
}

void ParameterStore::visit_owned(
    const std::function<void(const nn::Parameter&, int64_t, const Tensor&, const Tensor&, const Tensor&)>& fn) {
  finish_update();
  const auto& segs = adamw_->segments();
  for (const auto& u : units_) {
    if (u->state != Where::SwapFile) {
      for (size_t i = u->first_segment; i < u->end_segment; ++i)
        fn(*segment_param_[i], segs[i].offset, segs[i].value, adamw_->exp_avg()[i], adamw_->exp_avg_sq()[i]);
      continue;
    }
    // Paged in (into memory of its own: the caller may keep the views), visited, written back (a checkpoint that
    // loads writes through these views).
    const std::array<Tensor, 3> state = swap_.read_state(*u, /*own_buffer=*/true);
    for (size_t i = u->first_segment; i < u->end_segment; ++i) {
      const int64_t n = segs[i].grad.numel(), at = segment_start_[i];
      fn(*segment_param_[i], segs[i].offset, state[0].flat_slice(at, n, {n}), state[1].flat_slice(at, n, {n}),
         state[2].flat_slice(at, n, {n}));
    }
    swap_.write_state(*u, state[0]);
  }
}

void ParameterStore::update_after(Device& device, uint64_t ticket) {
  if (&device == &device_ && ticket != 0) state_read_ = ticket;
}

void ParameterStore::values_changed() { refresh_values(); }

void ParameterStore::visit_full_values(const std::function<void(const nn::Parameter&, const Tensor&)>& fn) {
  finish_update();
  for (auto& u : units_) {
    use_values(*u);
    for (nn::Parameter* p : u->params)
      if (!p->replica) fn(*p, p->value);
    if (values_transient()) release_values(*u);
  }
}

}  // namespace tandem::parallel
