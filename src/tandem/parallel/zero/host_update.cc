// ParameterStore's offloaded units (parameter_store.h): their gradients down to host memory, the host AdamW, and
// their updated values back up. The device side of each copy is ordered by the device's transfer tickets
// (device_interface.h): a copy starts after the device work it depends on, and device work that reads its result
// waits for it. The update runs on a thread of its own while the caller goes on to the next step; every use of an
// offloaded unit waits for that unit's update first. Everything else of the store is in parameter_store.cc.
#include <algorithm>
#include <chrono>
#include <utility>

#include "tandem/ops/ops.h"
#include "tandem/ops/profile.h"
#include "tandem/parallel/zero/parameter_store.h"

namespace tandem::parallel {

Tensor ParameterStore::values_for_upload(Unit& u, int64_t n) {
  if (!u.values_staged) return host_values_of(u, /*read=*/false, /*updating=*/true);
  u.upload_buffer = next_upload_buffer_;
  next_upload_buffer_ = (next_upload_buffer_ + 1) % upload_buffers_.size();
  device_.host_waits(std::exchange(upload_tickets_[u.upload_buffer], 0));  // its last upload has left
  return upload_buffers_[u.upload_buffer].flat_slice(0, n, {n});
}

void ParameterStore::upload_values(Unit& u, const Tensor& source, int64_t at, uint64_t after, bool record) {
  if (param_offload_) return;  // the device takes the host shard just before each gather (gather_values)
  const Tensor& own =
      values_transient() ? u.values_shard : u.values.flat_slice(dp_.rank() * u.shard, u.shard, {u.shard});
  const Tensor dst = own.flat_slice(at, source.numel(), {source.numel()});
  const uint64_t start = record ? device_.mark(DeviceQueue::FromHost, after) : 0;
  // Uploads leave in order on their stream: the last piece's ticket stands for the unit's whole upload.
  u.upload = device_.copy_from_host_async(dst.raw(), source.raw(), dst.nbytes(), after);
  if (u.values_staged) upload_tickets_[u.upload_buffer] = u.upload;
  if (record) timeline_.span("to device", u.label, start, device_.mark(DeviceQueue::FromHost));
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
    // The sum of the step's earlier micro-batches, back up for this backward to add into.
    finish_download();
    u.grads = Tensor::empty(full, DType::F32, device_, u.label + " gradients");
    device_.device_waits(
        device_.copy_from_host_async(u.grads.raw(), u.host_grads.raw(), u.grads.nbytes(), device_.fence()));
  }
  point_grads(u, u.grads);
}

void ParameterStore::download_gradient(Unit& u) {
  wait_updated(u);  // the last update read this unit's gradient shard, which the copy overwrites
  finish_download();
  PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
  const bool last = ++u.arrived >= micro_batches_ * u.uses;
  GradientDownload d;
  d.unit = &u;
  d.last = last;
  d.source = u.grads;         // the full sum so far; with one replica also the owned shard
  Tensor dst = u.host_grads;  // where the copy lands on the host
  if (stage_ >= 2 || last) {
    if (dp_.size() > 1) {
      d.source = Tensor::empty({u.shard}, DType::F32, device_, u.label + " reduced gradient");
      dp_.reduce_scatter(u.grads, d.source);
    }
    // At stages 0-1 the step's one reduced sum; at 2-3 the step's first micro-batch goes straight into the host
    // shard and the later ones land beside it, to be added.
    dst = u.grad_shard;
    if (stage_ >= 2 && u.arrived > 1) {
      PurposeScope host_scope(host(), MemoryPurpose::ZeroBuffers);
      d.staging = dst = Tensor::empty({u.shard}, DType::F32, host(), u.label + " gradient from the device");
    }
  }
  point_grads(u, Tensor());
  u.grads = Tensor();
  const uint64_t fence = device_.fence();
  const bool record = timeline_.in_recorded_step();
  const uint64_t start = record ? device_.mark(DeviceQueue::ToHost, fence) : 0;
  d.ticket = device_.copy_to_host_async(dst.raw(), d.source.raw(), d.source.nbytes(), fence);
  if (record) timeline_.span("to host", u.label, start, device_.mark(DeviceQueue::ToHost));
  download_ = std::move(d);
}

void ParameterStore::finish_download() {
  if (!download_) return;
  device_.host_waits(download_->ticket);
  if (download_->staging.defined()) ops::axpy(1.0f, download_->staging, download_->unit->grad_shard);
  Unit& u = *download_->unit;
  const bool complete = download_->last;
  download_.reset();
  // The unit's gradient of the step is whole on the host: with the update in the backward, it starts now.
  if (complete && in_backward_) queue_update(u, in_backward_->lr, in_backward_->grad_scale);
}

void ParameterStore::write_values(const Unit& u, const QueuedUpdate* update, const std::array<Tensor, 3>& state,
                                  int64_t begin, int64_t end, const Tensor& values) {
  const auto& segs = adamw_->segments();
  const Tensor master = u.swapped ? state[0] : u.master;  // (shard) fp32
  const auto piece = [](const Tensor& t, int64_t at, int64_t n) { return t.flat_slice(at, n, {n}); };
  // 16-bit values are rounded from the master by the AdamW pass itself; what no segment's update writes (the padding
  // past the last parameter; everything without an update) is cast on its own. fp32 values are the master, or a copy.
  const bool rounding = values.dtype() != DType::F32;
  int64_t done = begin;  // elements of the unit written so far, in order
  const auto cast_up_to = [&](int64_t to) {
    if (rounding && to > done) ops::cast(piece(master, done, to - done), piece(values, done - begin, to - done));
  };
  for (size_t i = u.first_segment; update && i < u.end_segment; ++i) {
    // The segment's elements inside [begin, end): [a, b) of the unit, from `off` on in the segment.
    const int64_t at = segment_start_[i], a = std::max(at, begin), b = std::min(at + segs[i].grad.numel(), end);
    if (a >= b) continue;
    TANDEM_CHECK(a >= done, "offloaded update: segments of ", u.label, " out of order");
    cast_up_to(a);
    const int64_t n = b - a, off = a - at;
    const Tensor rounded = rounding ? piece(values, a - begin, n) : Tensor();
    const Tensor value = u.swapped ? piece(state[0], a, n) : piece(segs[i].value, off, n);
    const Tensor exp_avg = u.swapped ? piece(state[1], a, n) : piece(adamw_->exp_avg()[i], off, n);
    const Tensor exp_avg_sq = u.swapped ? piece(state[2], a, n) : piece(adamw_->exp_avg_sq()[i], off, n);
    adamw_->update_one(i, value, exp_avg, exp_avg_sq, update->lr, update->grad_scale, rounded, update->step, off);
    done = b;
  }
  cast_up_to(end);
  if (!rounding && !values.shares_storage(master)) ops::cast(piece(master, begin, end - begin), values);
}

void ParameterStore::update_values(Unit& u, const QueuedUpdate* update, uint64_t after, bool record) {
  std::array<Tensor, 3> state;  // a swapped unit's master, exp_avg and exp_avg_sq, paged in
  if (u.swapped) state = swap_.read_state(u);
  // A staged unit in pieces through the upload buffers; any other in one piece, its host values.
  const int64_t total = u.grad_shard.numel(), piece = u.values_staged ? upload_piece_ : std::max<int64_t>(total, 1);
  for (int64_t begin = 0; begin < total; begin += piece) {
    const int64_t end = std::min(begin + piece, total);
    const Tensor values = values_for_upload(u, end - begin);
    write_values(u, update, state, begin, end, values);
    if (u.values_swapped) swap_.write_values(u, values);
    upload_values(u, values, begin, after, record);
  }
  if (u.swapped && update) swap_.write_state(u, state[0]);
}

void ParameterStore::run_update(const QueuedUpdate& q) {
  const auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const double started = now();
  update_values(*q.unit, &q, q.fence, q.record);
  // The span holds the unit's AdamW and the issue of its uploads, which wait only for an upload buffer to be free.
  if (q.record) timeline_.host_span("host AdamW", q.unit->label, started, now());
}

void ParameterStore::queue_update(Unit& u, float lr, float grad_scale) {
  if (u.queued) return;
  u.queued = true;
  // The upload overwrites values the step's backward reads: it starts after everything queued so far. The step it
  // belongs to and whether it is the recorded one are decided here: the next step's begin_step() counts the next step
  // and moves the timeline's phase on while this update may still run.
  const QueuedUpdate q{&u, lr, grad_scale, adamw_->step_count(), device_.fence(), timeline_.records_update()};
  // The planner's counting device accounts in order, and the op profile times on one thread: both update here.
  if (!device_.holds_data() || ops::profile::enabled()) {
    run_update(q);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(update_mu_);
    ++u.update_pending;
    update_queue_.push_back(q);
    if (!updater_.joinable()) updater_ = std::thread([this] { update_loop(); });
  }
  update_cv_.notify_all();
}

void ParameterStore::update_loop() {
  std::unique_lock<std::mutex> lock(update_mu_);
  for (;;) {
    update_cv_.wait(lock, [&] { return stop_updater_ || !update_queue_.empty(); });
    if (update_queue_.empty()) return;  // stopping, nothing left
    const QueuedUpdate q = update_queue_.front();
    update_queue_.pop_front();
    const bool failed = update_error_ != nullptr;  // after a failure the rest is only marked done
    lock.unlock();
    try {
      if (!failed) run_update(q);
    } catch (...) {
      lock.lock();
      if (!update_error_) update_error_ = std::current_exception();
      lock.unlock();
    }
    lock.lock();
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

std::unique_ptr<Timeline> ParameterStore::take_timeline(bool at_end) {
  if (!timeline_.ready(at_end)) return nullptr;
  finish_update();  // the recorded step's updates add their spans
  return timeline_.take();
}

void ParameterStore::finish_update() {
  std::unique_lock<std::mutex> lock(update_mu_);
  update_cv_.wait(lock, [&] {
    return update_queue_.empty() && std::none_of(units_.begin(), units_.end(),
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
  if (updater_.joinable()) updater_.join();
}

}  // namespace tandem::parallel
