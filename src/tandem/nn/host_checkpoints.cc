#include "tandem/nn/host_checkpoints.h"

namespace tandem::nn {

HostCheckpoints::~HostCheckpoints() {
  // The host buffers go with this object: no copy may still be reading or writing them.
  if (has_pending_) device_.host_waits(pending_);
  for (auto& [address, c] : coming_) device_.host_waits(c.ticket);
  for (const Spare& s : spare_) device_.host_waits(s.read);
}

// A host buffer like `like`: the most recently returned one of its shape and dtype, once the copy that read it last is
// done, else a new one. The choice depends only on the calls made, so the planner's counting host makes the same.
Tensor HostCheckpoints::host_buffer(const Tensor& like) {
  for (size_t i = spare_.size(); i-- > 0;) {
    if (spare_[i].host.shape() != like.shape() || spare_[i].host.dtype() != like.dtype()) continue;
    Spare s = std::move(spare_[i]);
    spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
    device_.host_waits(s.read);  // long done: it came down before an earlier layer's backward
    return s.host;
  }
  const PurposeScope scope(host_, MemoryPurpose::Activations);
  return Tensor::empty(like.shape(), like.dtype(), host_, "checkpointed layer input (host)");
}

template <class Copy>
uint64_t HostCheckpoints::issue(bool up, const std::string& layer, uint64_t after, Copy&& copy) {
  if (!timeline_ || !timeline_->records_copy(up)) return copy();
  const DeviceQueue queue = up ? DeviceQueue::ToHost : DeviceQueue::FromHost;
  const uint64_t start = device_.mark(queue, after);
  const uint64_t ticket = copy();
  timeline_->copied(up, "checkpoint " + layer, start, device_.mark(queue));
  return ticket;
}

Saved HostCheckpoints::copy_up(const Tensor& x, const std::string& layer) {
  TANDEM_CHECK(!has_pending_, "host checkpoints: a copy up is still pending");
  Tensor h = host_buffer(x);
  // After the work that made x; x is only read from here on, by the copy and by the layer, so both may run at once.
  const uint64_t after = device_.fence();
  pending_ = issue(true, layer, after, [&] { return device_.copy_to_host_async(h.raw(), x.raw(), x.nbytes(), after); });
  has_pending_ = true;
  return Saved{{h}, {}, {}};
}

void HostCheckpoints::release_after_copy() {
  if (!has_pending_) return;
  // The device's next use of x's memory, once the caller lets x go, is queued after this wait.
  device_.device_waits(pending_);
  has_pending_ = false;
}

void HostCheckpoints::prefetch(const Saved& s, const std::string& layer) {
  const Tensor& h = s.tensors.at(0);
  if (coming_.count(h.raw())) return;
  Coming c;
  c.device = Tensor::empty(h.shape(), h.dtype(), device_, "checkpointed layer input");
  // After every device work queued so far: the memory the new tensor reuses is free of it then. The host buffer was
  // filled by a copy up that device work before this fence waited for (release_after_copy).
  const uint64_t after = device_.fence();
  c.ticket = issue(false, layer, after,
                   [&] { return device_.copy_from_host_async(c.device.raw(), h.raw(), h.nbytes(), after); });
  coming_.emplace(h.raw(), std::move(c));
}

Tensor HostCheckpoints::take(const Saved& s, const std::string& layer) {
  const Tensor& h = s.tensors.at(0);
  prefetch(s, layer);  // not prefetched (the range's first to come back): brought now
  const auto it = coming_.find(h.raw());
  Coming c = std::move(it->second);
  coming_.erase(it);
  device_.device_waits(c.ticket);
  spare_.push_back({h, c.ticket});
  return c.device;
}

}  // namespace tandem::nn
