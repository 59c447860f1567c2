// ParameterStore's offloaded units (parameter_store.h): their gradients down to host memory, the host AdamW, and
// their updated values back up. The device side of each copy is ordered by the device's transfer tickets
// (device_interface.h): a copy starts after the device work it depends on, and device work that reads its result
// waits for it. The update runs on a thread of its own while the caller goes on to the next step; every use of an
// offloaded unit waits for that unit's update first. Everything else of the store is in parameter_store.cc.
#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>

#include "tandem/ops/ops.h"
#include "tandem/ops/profile.h"
#include "tandem/parallel/zero/parameter_store.h"

namespace tandem::parallel {

Tensor ParameterStore::values_for_upload(Unit& u) {
  if (!u.values_staged) return host_values_of(u, /*read=*/false, /*updating=*/true);
  u.upload_buffer = next_upload_buffer_;
  next_upload_buffer_ = (next_upload_buffer_ + 1) % upload_buffers_.size();
  device_.host_waits(std::exchange(upload_tickets_[u.upload_buffer], 0));  // its last upload has left
  const int64_t mn = u.grad_shard.numel();
  return upload_buffers_[u.upload_buffer].flat_slice(0, mn, {mn});
}

Tensor ParameterStore::values_from_master(Unit& u) {
  const Tensor values = values_for_upload(u);
  if (u.swapped)
    ops::cast(swap_in(u)[0], values);
  else if (!values.shares_storage(u.master))  // host_values is the master itself in fp32
    ops::cast(u.master, values);
  if (u.values_swapped && values_swap_) values_swap_->write(u.values_offset, values.raw(), u.values_bytes);
  return values;
}

void ParameterStore::upload_values(Unit& u, const Tensor& source, uint64_t after, bool record) {
  if (param_offload_) return;  // the device takes the host shard just before each gather (gather_values)
  const Tensor& dst =
      values_transient() ? u.values_shard : u.values.flat_slice(dp_.rank() * u.shard, u.shard, {u.shard});
  const uint64_t start = record ? device_.mark(/*transfers=*/true, after) : 0;
  u.upload = device_.copy_from_host_async(dst.raw(), source.raw(), dst.nbytes(), after);
  if (u.values_staged) upload_tickets_[u.upload_buffer] = u.upload;
  if (record) mark_span("to device", u.label, start, device_.mark(/*transfers=*/true));
  // With one replica the owned slice is the whole buffer; otherwise the replicas' slices are gathered again.
  u.stale = !values_transient() && dp_.size() > 1;
}

void ParameterStore::make_current(Unit& u) {
  wait_updated(u);
  device_.device_waits(u.upload);
  if (!u.stale) return;
  const Tensor own = u.values.flat_slice(dp_.rank() * u.shard, u.shard, {u.shard});
  dp_.all_gather(own, u.values);
  u.stale = false;
}

void ParameterStore::prepare_gradient(Unit& u) {
  PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
  const Shape full{u.shard * dp_.size()};
  if (stage_ >= 2 || u.arrived == 0) {
    u.grads = Tensor::zeros(full, DType::F32, device_, u.label + " gradients");
  } else {
    // The sum of the step's earlier micro-batches, back up for this backward to add into: on the transfer stream
    // behind the copy down that brought it, so no host wait.
    release_download();
    u.grads = Tensor::empty(full, DType::F32, device_, u.label + " gradients");
    device_.device_waits(
        device_.copy_from_host_async(u.grads.raw(), u.host_grads.raw(), u.grads.nbytes(), device_.fence()));
  }
  point_grads(u, u.grads);
}

void ParameterStore::download_gradient(Unit& u) {
  wait_updated(u);  // the last update read this unit's gradient shard, which the copy overwrites
  release_download();
  PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
  const bool last = ++u.arrived >= micro_batches_ * u.uses;
  Tensor source = u.grads;    // the full sum so far; with one replica also the owned shard
  Tensor dst = u.host_grads;  // where the copy lands on the host
  int staging = -1;           // which staging buffer, when the copy lands beside the shard to be added
  if (stage_ >= 2 || last) {
    if (dp_.size() > 1) {
      source = Tensor::empty({u.shard}, DType::F32, device_, u.label + " reduced gradient");
      dp_.reduce_scatter(u.grads, source);
    }
    // At stages 0-1 the step's one reduced sum; at 2-3 the step's first micro-batch goes straight into the host
    // shard and the later ones land in a staging buffer, to be added.
    dst = u.grad_shard;
    if (stage_ >= 2 && u.arrived > 1) {
      staging = take_staging();
      dst = staging_[static_cast<size_t>(staging)].flat_slice(0, u.shard, {u.shard});
    }
  }
  point_grads(u, Tensor());
  u.grads = Tensor();
  const uint64_t fence = device_.fence();
  const uint64_t start = timeline_phase_ == 1 ? device_.mark(/*transfers=*/true, fence) : 0;
  const uint64_t ticket = device_.copy_to_host_async(dst.raw(), source.raw(), source.nbytes(), fence);
  if (timeline_phase_ == 1) mark_span("to host", u.label, start, device_.mark(/*transfers=*/true));
  download_source_ = source;
  download_ticket_ = ticket;
  // The copy that lands in host_grads to go up again needs no host work; the others do (an add, or the step's
  // gradient whole: its sums of squares, and the update when it runs in the backward).
  if (staging >= 0 || last) {
    Arrival a{&u, ticket, staging, last, std::nullopt};
    if (last && in_backward_) a.then_update = make_update(u, in_backward_->lr, in_backward_->grad_scale);
    queue_arrival(std::move(a));
  }
}

void ParameterStore::release_download() {
  if (!download_source_.defined()) return;
  // Device work queued from here on, which may reuse the source's memory, runs after the copy has read it.
  device_.device_waits(download_ticket_);
  download_source_ = Tensor();
}

int ParameterStore::take_staging() {
  std::unique_lock<std::mutex> lock(update_mu_);
  const int b = static_cast<int>(next_staging_);
  next_staging_ = (next_staging_ + 1) % staging_.size();
  update_cv_.wait(lock, [&] { return !staging_busy_[static_cast<size_t>(b)]; });  // its last add is done
  staging_busy_[static_cast<size_t>(b)] = true;
  return b;
}

void ParameterStore::process_arrival(const Arrival& a) {
  Unit& u = *a.unit;
  device_.host_waits(a.ticket);
  if (a.staging >= 0)
    ops::axpy(1.0f, staging_[static_cast<size_t>(a.staging)].flat_slice(0, u.shard, {u.shard}), u.grad_shard);
  if (!a.last) return;
  // The step's gradient of the unit is whole: its segments' sums of squares for the gradient norm, taken here beside
  // the device's work rather than at the step's end.
  for (size_t i = u.first_segment; i < u.end_segment; ++i)
    segment_sum_squares_[i] = ops::sum_squares(adamw_->segments()[i].grad);
}

void ParameterStore::queue_arrival(Arrival a) {
  if (a.then_update) a.unit->queued = true;
  if (!device_.holds_data() || ops::profile::enabled()) {  // in order, on this thread (as queue_update)
    process_arrival(a);
    if (a.staging >= 0) staging_busy_[static_cast<size_t>(a.staging)] = false;
    if (a.then_update) run_update(*a.then_update);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(update_mu_);
    if (a.then_update) ++a.unit->update_pending;  // waits for it start now, before the update is even queued
    arrivals_.push_back(std::move(a));
    start_updater();
  }
  update_cv_.notify_all();
}

void ParameterStore::wait_arrivals() {
  std::unique_lock<std::mutex> lock(update_mu_);
  update_cv_.wait(lock, [&] { return arrivals_.empty() && !processing_arrival_; });
  if (update_error_) std::rethrow_exception(std::exchange(update_error_, nullptr));
}

Tensor ParameterStore::update_unit(Unit& u, float lr, float grad_scale, int64_t step) {
  const auto& segs = adamw_->segments();
  std::array<Tensor, 3> state;  // a swapped unit's master, exp_avg and exp_avg_sq, paged in
  if (u.swapped) state = swap_in(u);
  const Tensor master = u.swapped ? state[0] : u.master;  // (shard) fp32
  const Tensor values = values_for_upload(u);             // (shard) in the compute dtype, for the device
  // 16-bit values are rounded from the master by the AdamW pass itself; the padding past the last parameter (and any
  // other element no segment updates) is cast on its own. fp32 values are the master, or a copy of it.
  const bool fused = values.dtype() != DType::F32;
  const int64_t mn = master.numel();
  int64_t done = 0;  // elements of `values` written so far, in order
  const auto cast_up_to = [&](int64_t end) {
    if (fused && end > done)
      ops::cast(master.flat_slice(done, end - done, {end - done}), values.flat_slice(done, end - done, {end - done}));
  };
  for (size_t i = u.first_segment; i < u.end_segment; ++i) {
    const int64_t n = segs[i].grad.numel(), at = segment_start_[i];
    TANDEM_CHECK(at >= done, "offloaded update: segments of ", u.label, " out of order");
    cast_up_to(at);
    const Tensor rounded = fused ? values.flat_slice(at, n, {n}) : Tensor();
    if (u.swapped)
      adamw_->update_one(i, state[0].flat_slice(at, n, {n}), state[1].flat_slice(at, n, {n}),
                         state[2].flat_slice(at, n, {n}), lr, grad_scale, rounded, step);
    else
      adamw_->update_one(i, segs[i].value, adamw_->exp_avg()[i], adamw_->exp_avg_sq()[i], lr, grad_scale, rounded,
                         step);
    done = at + n;
  }
  cast_up_to(mn);
  if (!fused && !values.shares_storage(master)) ops::cast(master, values);
  if (u.values_swapped && values_swap_) values_swap_->write(u.values_offset, values.raw(), u.values_bytes);
  if (u.swapped) swap_out(u, state[0]);
  return values;
}

void ParameterStore::run_update(const QueuedUpdate& q) {
  const auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const double started = now();
  const Tensor values = update_unit(*q.unit, q.lr, q.grad_scale, q.step);
  if (q.record) timeline_->add("host AdamW", q.unit->label, started, now());
  upload_values(*q.unit, values, q.fence, q.record);
}

ParameterStore::QueuedUpdate ParameterStore::make_update(Unit& u, float lr, float grad_scale) {
  // The upload overwrites values the step's backward reads: it starts after everything queued so far. The step it
  // belongs to and whether it is the recorded one are decided here: the next step's begin_step() counts the next step
  // and moves the timeline's phase on while this update may still run.
  return {&u, lr, grad_scale, adamw_->step_count(), device_.fence(), timeline_phase_ == 1 && timeline_ != nullptr};
}

void ParameterStore::queue_update(Unit& u, float lr, float grad_scale) {
  if (u.queued) return;
  u.queued = true;
  const QueuedUpdate q = make_update(u, lr, grad_scale);
  // The planner's counting device accounts in order, and the op profile times on one thread: both update here.
  if (!device_.holds_data() || ops::profile::enabled()) {
    run_update(q);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(update_mu_);
    ++u.update_pending;
    update_queue_.push_back(q);
    start_updater();
  }
  update_cv_.notify_all();
}

void ParameterStore::start_updater() {
  if (updater_.joinable()) return;
  // The host's share of the cores: the arrivals' adds and sums a quarter, the updates the rest but one, which stays
  // with the thread that launches a GPU's work (its launches must not wait for the host's update).
  const int cores = ops::cpu_threads();
  const bool gpu = device_.kind() == DeviceKind::Cuda;
  arrivals_thread_ = std::thread([this, cores, gpu] {
    if (gpu) ops::set_cpu_threads(std::max(1, cores / 4));
    arrival_loop();
  });
  updater_ = std::thread([this, cores, gpu] {
    if (gpu) ops::set_cpu_threads(std::max(1, cores - 1));
    update_loop();
  });
}

// A job of one of the two threads, outside the lock; the first failure is kept, and after it the jobs are only
// marked done.
void ParameterStore::run_job(std::unique_lock<std::mutex>& lock, const std::function<void()>& job) {
  const bool failed = update_error_ != nullptr;
  lock.unlock();
  try {
    if (!failed) job();
  } catch (...) {
    lock.lock();
    if (!update_error_) update_error_ = std::current_exception();
    lock.unlock();
  }
  lock.lock();
}

void ParameterStore::arrival_loop() {
  std::unique_lock<std::mutex> lock(update_mu_);
  for (;;) {
    update_cv_.wait(lock, [&] { return stop_updater_ || !arrivals_.empty(); });
    if (arrivals_.empty()) return;  // stopping, nothing left
    const Arrival a = std::move(arrivals_.front());
    arrivals_.pop_front();
    processing_arrival_ = true;
    // Waits for its copy (the device's backward goes on meanwhile), so on a thread apart from the updates.
    run_job(lock, [&] { process_arrival(a); });
    processing_arrival_ = false;
    if (a.staging >= 0) staging_busy_[static_cast<size_t>(a.staging)] = false;
    if (a.then_update) update_queue_.push_back(*a.then_update);  // counted pending when the arrival was queued
    update_cv_.notify_all();
  }
}

void ParameterStore::update_loop() {
  std::unique_lock<std::mutex> lock(update_mu_);
  for (;;) {
    update_cv_.wait(lock, [&] { return stop_updater_ || !update_queue_.empty(); });
    if (update_queue_.empty()) {
      if (arrivals_.empty() && !processing_arrival_) return;  // stopping, nothing left or to come
      update_cv_.wait(lock, [&] { return !update_queue_.empty() || (arrivals_.empty() && !processing_arrival_); });
      continue;
    }
    const QueuedUpdate q = update_queue_.front();
    update_queue_.pop_front();
    run_job(lock, [&] { run_update(q); });
    --q.unit->update_pending;
    update_cv_.notify_all();
  }
}

void ParameterStore::start_update(float lr, float grad_scale) {
  // Units no backward reached this step have a zero gradient; the rest were queued as their gradients came down when
  // the update runs in the backward (begin_step), and are queued here, in layer order, when it runs after it.
  for (const auto& u : units_) {
    if (!u->offloaded || u->queued) continue;
    if (u->arrived == 0) {
      wait_updated(*u);
      u->grad_shard.fill_zero();
    }
    queue_update(*u, lr, grad_scale);
  }
  in_backward_ = std::nullopt;
}

void ParameterStore::wait_updated(const Unit& u) {
  std::unique_lock<std::mutex> lock(update_mu_);
  update_cv_.wait(lock, [&] { return u.update_pending == 0; });
  if (update_error_) std::rethrow_exception(std::exchange(update_error_, nullptr));
}

void ParameterStore::mark_span(std::string track, std::string name, uint64_t start, uint64_t end) {
  std::lock_guard<std::mutex> lock(timeline_mu_);
  marked_.push_back({std::move(track), std::move(name), start, end});
}

std::unique_ptr<Timeline> ParameterStore::take_timeline(bool at_end) {
  if (!timeline_ || timeline_phase_ < (at_end ? 1 : 2)) return nullptr;
  finish_update();
  for (const MarkedSpan& m : marked_)
    timeline_->add(m.track, m.name, device_.mark_seconds(m.start), device_.mark_seconds(m.end));
  marked_.clear();
  timeline_phase_ = 0;
  return std::move(timeline_);
}

void ParameterStore::finish_update() {
  std::unique_lock<std::mutex> lock(update_mu_);
  update_cv_.wait(lock, [&] {
    return arrivals_.empty() && !processing_arrival_ && update_queue_.empty() &&
           std::none_of(units_.begin(), units_.end(),
                        [](const std::unique_ptr<Unit>& u) { return u->update_pending > 0; });
  });
  if (update_error_) std::rethrow_exception(std::exchange(update_error_, nullptr));
}

void ParameterStore::stop_updater() {
  {
    std::lock_guard<std::mutex> lock(update_mu_);
    stop_updater_ = true;
  }
  update_cv_.notify_all();
  if (arrivals_thread_.joinable()) arrivals_thread_.join();
  if (updater_.joinable()) updater_.join();
}

}  // namespace tandem::parallel
