#include "tandem/parallel/zero/parameter_store.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "tandem/core/dtype.h"
#include "tandem/ops/ops.h"

namespace tandem::parallel {

ParameterStore::ParameterStore(nn::Model& model, std::vector<size_t> layers, int zero_stage, comm::Communicator& dp,
                               Device& device, uint64_t seed, const spec::OptimizerConfig& adamw, DType compute,
                               comm::Communicator* tied, const OffloadOptions& offload, comm::Communicator* experts)
    : model_(model),
      compute_(compute),
      zero_(zero_stage, dp, device, compute, offload.param.enabled()),
      expert_zero_(experts
                       ? std::make_unique<ZeroSharding>(zero_stage, *experts, device, compute, offload.param.enabled())
                       : nullptr),
      tied_(tied),
      device_(device),
      host_(offload.host),
      param_offload_(offload.param.enabled()),
      micro_batches_(offload.micro_batches),
      swap_(offload.host, compute),
      upload_piece_(offload.optimizer.upload_piece) {
  TANDEM_CHECK(upload_piece_ > 0, "offload: upload pieces of ", upload_piece_, " elements");
  TANDEM_CHECK(!offload.optimizer.enabled() || host_, "offload_optimizer without host memory to offload to");
  TANDEM_CHECK(!param_offload_ || offload.optimizer.enabled(), "offload_param needs offload_optimizer");
  held_.assign(model.layers().size(), false);
  for (size_t layer : layers) held_.at(layer) = true;
  UnitBuilder builder(
      {model, zero_, expert_zero_.get(), device_, host_, swap_, compute_, seed, offload, tied_ != nullptr});
  Units units = builder.build(layers);
  units_ = std::move(units.all);
  units_of_layer_ = std::move(units.of_layer);
  segment_param_ = std::move(units.segment_param);
  segment_start_ = std::move(units.segment_start);
  for (const auto& u : units_) {
    offloaded_units_ += u->offloaded();
    for (const nn::Parameter* p : u->params) unit_of_param_[p] = u.get();
    for (const nn::Parameter* p : u->aliases) unit_of_param_[p] = u.get();
  }
  {
    PurposeScope as_optimizer(device_, MemoryPurpose::Optimizer);
    std::optional<PurposeScope> host_as_optimizer;
    if (host_) host_as_optimizer.emplace(*host_, MemoryPurpose::Optimizer);
    adamw_ = std::make_unique<optim::AdamW>(std::move(units.segments), adamw);
  }
  if (swap_bytes() > 0) {
    swap_.open(units_, offload.run.swap_files, offload.optimizer, offload.param,
               "dp rank " + std::to_string(zero_.rank()));
    if (swap_.has_state_file()) builder.draw_swapped(units_);
  }
  int64_t largest_staged = 0;
  for (const auto& u : units_)
    if (u->staged()) largest_staged = std::max(largest_staged, u->owned_grads.numel());
  updater_ =
      std::make_unique<OffloadUpdater>(OffloadUpdater::Setup{device_, host_, *adamw_, segment_start_, swap_, compute_,
                                                             upload_piece_, param_offload_, offload.run.update_thread},
                                       largest_staged);
  refresh_values();
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

const Unit& ParameterStore::unit_of(const nn::Parameter& p) const {
  const auto it = unit_of_param_.find(&p);
  if (it == unit_of_param_.end()) TANDEM_FAIL("'", p.name, "' is not held here");
  return *it->second;
}

void ParameterStore::gather_values(Unit& u) {
  u.zero->gather(u, [&](const Tensor& own) {
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
  });
}

void ParameterStore::refresh_values(bool offloaded_too) {
  if (offloaded_too) finish_update();
  ZeroSharding::Pending pending;
  const uint64_t fence = offloaded() && offloaded_too ? device_.fence() : 0;
  for (auto& u : units_) {
    if (u->frozen) continue;  // never updated (write_frozen gathers what it writes)
    if (u->offloaded()) {
      if (offloaded_too) updater_->upload_current(*u, fence);
    } else if (!u->zero->values_transient()) {  // else gathered from the master when needed
      u->zero->refresh(*u, pending);
    }
  }
  for (auto& r : pending) r->wait();
}

void ParameterStore::begin_step(std::optional<UpdateInBackward> in_backward) {
  if (offloaded() && in_backward) {
    // The step is counted now: the offloaded units' updates start before optimizer_step.
    adamw_->begin_step();
    in_backward_ = in_backward;
  }
  if (observer_) observer_->step_began(model_.layers().size());
  for (auto& u : units_) {
    u->arrived = 0;  // an offloaded unit's first gradient of the step is copied to the host, not added
    u->queued = false;
    if (u->offloaded()) continue;
    if (u->full_grads.defined()) u->full_grads.fill_zero();
    if (u->owned_grads.defined()) u->owned_grads.fill_zero();
  }
}

void ParameterStore::before_forward(size_t layer) {
  if (observer_) observer_->layer_began(layer, StepObserver::Pass::Forward);
  for (int i : units_of(layer)) {
    Unit& u = *units_[static_cast<size_t>(i)];
    use_values(u);
  }
}

void ParameterStore::use_values(Unit& u) {
  if (u.zero->values_transient())
    gather_values(u);
  else if (u.offloaded())
    make_current(u);
}

void ParameterStore::after_forward(size_t layer) {
  for (int i : units_of(layer)) {
    Unit& u = *units_[static_cast<size_t>(i)];
    if (u.zero->values_transient()) u.zero->release(u);
  }
  if (observer_) observer_->layer_ended(layer, StepObserver::Pass::Forward, model_.layers()[layer]->name());
}

void ParameterStore::before_backward(size_t layer) {
  if (observer_) observer_->layer_began(layer, StepObserver::Pass::Backward);
  for (int i : units_of(layer)) {
    Unit& u = *units_[static_cast<size_t>(i)];
    use_values(u);
    if (u.offloaded()) {
      prepare_gradient(u);
    } else if (u.zero->grads_transient() && !u.frozen) {
      u.zero->open_gradients(u);
    }
  }
}

void ParameterStore::after_backward(size_t layer) {
  for (int i : units_of(layer)) {
    Unit& u = *units_[static_cast<size_t>(i)];
    if (u.offloaded()) {
      download_gradient(u);
    } else if (u.zero->grads_transient() && !u.frozen) {
      u.zero->close_gradients(u);
    }
    if (u.zero->values_transient()) u.zero->release(u);
  }
  if (observer_) observer_->layer_ended(layer, StepObserver::Pass::Backward, model_.layers()[layer]->name());
}

void ParameterStore::reduce_gradients() {
  finish_download();
  // Offloaded units reduced theirs as their backward ended.
  // Each group's resident units together: the dp group's, then the expert units' over theirs.
  for (ZeroSharding* zero : {&zero_, expert_zero_.get()}) {
    std::vector<Unit*> resident;
    for (auto& u : units_)
      if (u->zero == zero && !u->offloaded() && !u->frozen) resident.push_back(u.get());
    if (!resident.empty()) zero->reduce(resident);
  }
}

void ParameterStore::tie_gradients() {
  for (auto& u : units_)
    if (u->tied_remote && !u->frozen) tied_->all_reduce(u->zero->update_grads(*u), comm::ReduceOp::Sum);
}

double ParameterStore::grad_sum_of_squares(bool count_replicated) const {
  std::vector<Tensor> counted;
  const auto& segments = adamw_->segments();
  // A replica's gradient is its original's (summed between them): counted once, where the original is. A unit's
  // gradients are counted by the ranks its sharding says (all of them for their shards, or the group's first).
  for (const auto& u : units_) {
    if (!u->zero->counts_gradients()) continue;
    for (size_t i = u->first_segment; i < u->end_segment; ++i) {
      const nn::Parameter& p = *segment_param_[i];
      if (!p.replica && (count_replicated || nn::tp_sharded(p))) counted.push_back(segments[i].grad);
    }
  }
  if (counted.empty()) return 0.0;
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
    if (u->zero->values_transient()) u->zero->release(*u);
  }
}

}  // namespace tandem::parallel
