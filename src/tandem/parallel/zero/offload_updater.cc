#include "tandem/parallel/zero/offload_updater.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "tandem/ops/ops.h"
#include "tandem/parallel/zero/zero_sharding.h"

namespace tandem::parallel {

OffloadUpdater::OffloadUpdater(const Setup& setup, int64_t largest_staged) : s_(setup) {
  if (largest_staged == 0) return;
  PurposeScope scope(*s_.host, MemoryPurpose::Parameters);
  const int64_t n = std::min(largest_staged, s_.upload_piece);
  for (Tensor& b : upload_buffers_) b = Tensor::zeros({n}, s_.compute, *s_.host, "parameter upload buffer");
}

void OffloadUpdater::submit(const QueuedUpdate& q) {
  if (!s_.thread) {
    run(q);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++pending_[q.unit];
    ++in_flight_;
    queue_.push_back(q);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_all();
}

void OffloadUpdater::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    const QueuedUpdate q = queue_.front();
    queue_.pop_front();
    const bool failed = error_ != nullptr;  // after a failure the rest is only marked done
    lock.unlock();
    try {
      if (!failed) run(q);
    } catch (...) {
      lock.lock();
      if (!error_) error_ = std::current_exception();
      lock.unlock();
    }
    lock.lock();
    --pending_[q.unit];
    --in_flight_;
    cv_.notify_all();
  }
}

void OffloadUpdater::wait(const Unit& u) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    const auto it = pending_.find(&u);
    return it == pending_.end() || it->second == 0;
  });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void OffloadUpdater::finish() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && in_flight_ == 0; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void OffloadUpdater::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OffloadUpdater::run(const QueuedUpdate& q) {
  const auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const double started = now();
  update_values(*q.unit, &q, q.fence, q.watcher);
  // The span holds the unit's AdamW and the issue of its uploads, which wait only for an upload buffer to be free.
  if (q.watcher) q.watcher->host_updated(q.unit->label, started, now());
}

void OffloadUpdater::update_values(Unit& u, const QueuedUpdate* update, uint64_t after, StepObserver* watcher) {
  std::array<Tensor, 3> state;  // a swapped unit's master, exp_avg and exp_avg_sq, paged in
  if (u.state == Where::SwapFile) state = s_.swap.read_state(u);
  // A staged unit in pieces through the upload buffers; any other in one piece, its host values.
  const int64_t total = u.owned_grads.numel(), piece = u.staged() ? s_.upload_piece : std::max<int64_t>(total, 1);
  for (int64_t begin = 0; begin < total; begin += piece) {
    const int64_t end = std::min(begin + piece, total);
    const Tensor values = values_for_upload(u, end - begin);
    write_values(u, update, state, begin, end, values);
    if (u.owned_values == Where::SwapFile) s_.swap.write_values(u, values);
    upload(u, values, begin, after, watcher);
  }
  if (u.state == Where::SwapFile && update) s_.swap.write_state(u, state[0]);
}

void OffloadUpdater::write_values(const Unit& u, const QueuedUpdate* update, const std::array<Tensor, 3>& state,
                                  int64_t begin, int64_t end, const Tensor& values) {
  const auto& segs = s_.adamw.segments();
  const bool swapped = u.state == Where::SwapFile;      // its state is read_state's views
  const Tensor master = swapped ? state[0] : u.master;  // (shard) fp32
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
    const int64_t at = s_.segment_start[i], a = std::max(at, begin), b = std::min(at + segs[i].grad.numel(), end);
    if (a >= b) continue;
    TANDEM_CHECK(a >= done, "offloaded update: segments of ", u.label, " out of order");
    cast_up_to(a);
    const int64_t n = b - a, off = a - at;
    const Tensor rounded = rounding ? piece(values, a - begin, n) : Tensor();
    const Tensor value = swapped ? piece(state[0], a, n) : piece(segs[i].value, off, n);
    const Tensor exp_avg = swapped ? piece(state[1], a, n) : piece(s_.adamw.exp_avg()[i], off, n);
    const Tensor exp_avg_sq = swapped ? piece(state[2], a, n) : piece(s_.adamw.exp_avg_sq()[i], off, n);
    s_.adamw.update_one(i, value, exp_avg, exp_avg_sq, update->lr, update->grad_scale, rounded, update->step, off);
    done = b;
  }
  cast_up_to(end);
  if (!rounding && !values.shares_storage(master)) ops::cast(piece(master, begin, end - begin), values);
}

Tensor OffloadUpdater::values_for_upload(Unit& u, int64_t n) {
  if (!u.staged())
    return u.owned_values == Where::SwapFile ? s_.swap.values(u, /*read=*/false, /*updating=*/true)
                                             : u.owned_values_host;
  u.upload_buffer = next_upload_buffer_;
  next_upload_buffer_ = (next_upload_buffer_ + 1) % upload_buffers_.size();
  s_.device.host_waits(std::exchange(upload_tickets_[u.upload_buffer], 0));  // its last upload has left
  return upload_buffers_[u.upload_buffer].flat_slice(0, n, {n});
}

void OffloadUpdater::upload(Unit& u, const Tensor& source, int64_t at, uint64_t after, StepObserver* watcher) {
  if (s_.param_offload) return;  // the device takes the host shard just before each gather
  // The owned shard's place: its unit's sharding says whether the full values stay, and where this rank's part is.
  const Tensor& own = u.zero->values_transient() ? u.owned_values_device : u.zero->owned(u, u.full_values);
  const Tensor dst = own.flat_slice(at, source.numel(), {source.numel()});
  // Uploads leave in order on their stream: the last piece's ticket stands for the unit's whole upload.
  const auto copy = [&] { return s_.device.copy_from_host_async(dst.raw(), source.raw(), dst.nbytes(), after); };
  u.upload = watcher ? watcher->values_up(u.label, after, copy) : copy();
  if (u.staged()) upload_tickets_[u.upload_buffer] = u.upload;
  // With one replica the owned slice is the whole buffer; otherwise the replicas' slices are gathered again.
  u.stale = !u.zero->values_transient() && u.zero->size() > 1;
}

}  // namespace tandem::parallel
