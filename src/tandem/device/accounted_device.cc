#include "tandem/device/accounted_device.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/units.h"

namespace tandem::device {

void* AccountedDevice::allocate(size_t bytes, std::string_view what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (budget_ != 0 && live_ + bytes > budget_) {
    TANDEM_FAIL("out of device memory on ", name(), ": allocating '", what, "' (", format_bytes(bytes), ") would hold ",
                format_bytes(live_ + bytes), ", over the budget of ", format_bytes(budget_),
                "; already held: ", format_bytes(live_), describe_largest_locked(3),
                ". Raise \"device_memory\", or spread the model over more devices (\"parallel\").");
  }
  void* p = raw_allocate(bytes == 0 ? 1 : bytes);
  held_.emplace(p, Held{bytes, purpose_, name_holders_ ? std::string(what) : std::string()});
  live_ += bytes;
  live_by_[purpose_] += static_cast<int64_t>(bytes);
  if (live_ > peak_ && !peak_suspended_) {
    peak_ = live_;
    at_peak_ = live_by_;
    peak_label_ = label_;
    peak_live_mbs_ = live_mbs_;
  }
  if (live_ > window_peak_) {
    window_peak_ = live_;
    window_at_peak_ = live_by_;
    window_peak_label_ = label_;
    window_peak_live_mbs_ = live_mbs_;
  }
  return p;
}

void AccountedDevice::release(void* ptr, size_t bytes) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = held_.find(ptr);
  TANDEM_CHECK(it != held_.end(), "release of memory ", name(), " did not hand out");
  live_by_[it->second.purpose] -= static_cast<int64_t>(bytes);
  held_.erase(it);
  live_ -= bytes;
  raw_release(ptr);
}

uint64_t AccountedDevice::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

uint64_t AccountedDevice::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void AccountedDevice::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = live_;
  at_peak_ = live_by_;
  peak_label_ = label_;
  peak_live_mbs_ = live_mbs_;
}

Breakdown AccountedDevice::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_by_;
}

MemoryPurpose AccountedDevice::purpose_of(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = held_.find(const_cast<void*>(ptr));
  TANDEM_CHECK(it != held_.end(), "purpose_of memory ", name(), " does not hold");
  return it->second.purpose;
}

Breakdown AccountedDevice::at_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return at_peak_;
}

std::string AccountedDevice::peak_label() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_label_;
}

int AccountedDevice::peak_live_micro_batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_live_mbs_;
}

void AccountedDevice::set_label(std::string label, int live_micro_batches) {
  std::lock_guard<std::mutex> lock(mu_);
  label_ = std::move(label);
  live_mbs_ = live_micro_batches;
}

std::string AccountedDevice::label() const {
  std::lock_guard<std::mutex> lock(mu_);
  return label_;
}

int AccountedDevice::live_micro_batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_mbs_;
}

void AccountedDevice::suspend_peak(bool suspended) {
  std::lock_guard<std::mutex> lock(mu_);
  peak_suspended_ = suspended;
}

void AccountedDevice::start_window() {
  std::lock_guard<std::mutex> lock(mu_);
  window_peak_ = live_;
  window_at_peak_ = live_by_;
  window_peak_label_ = label_;
  window_peak_live_mbs_ = live_mbs_;
}

uint64_t AccountedDevice::window_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return window_peak_;
}

Breakdown AccountedDevice::window_at_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return window_at_peak_;
}

std::string AccountedDevice::window_peak_label() const {
  std::lock_guard<std::mutex> lock(mu_);
  return window_peak_label_;
}

int AccountedDevice::window_peak_live_micro_batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return window_peak_live_mbs_;
}

std::string AccountedDevice::describe_largest_locked(int count) const {
  // Group by name with the layer index stripped would hide detail; list the largest single holdings.
  std::vector<const Held*> all;
  all.reserve(held_.size());
  for (const auto& [ptr, h] : held_) all.push_back(&h);
  std::partial_sort(all.begin(), all.begin() + std::min<size_t>(count, all.size()), all.end(),
                    [](const Held* a, const Held* b) { return a->bytes > b->bytes; });
  std::ostringstream os;
  if (!all.empty()) os << " (largest: ";
  for (size_t i = 0; i < std::min<size_t>(count, all.size()); ++i)
    os << (i ? ", " : "") << "'" << (all[i]->what.empty() ? "?" : all[i]->what) << "' " << format_bytes(all[i]->bytes);
  if (!all.empty()) os << ")";
  return os.str();
}

}  // namespace tandem::device
