// AccountedDevice: the budget and the live/peak byte counters shared by every device kind.
// Subclasses provide raw memory (CPU: aligned host memory; CUDA: planned device arenas).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "tandem/core/device_interface.h"

namespace tandem::device {

class AccountedDevice : public Device {
 public:
  // budget_bytes == 0 means no budget.
  explicit AccountedDevice(uint64_t budget_bytes) : budget_(budget_bytes) {}

  void* allocate(size_t bytes, std::string_view what) final;
  void release(void* ptr, size_t bytes) final;

  uint64_t live_bytes() const;
  uint64_t peak_bytes() const;
  uint64_t budget_bytes() const { return budget_; }
  void set_budget(uint64_t bytes) { budget_ = bytes; }
  void reset_peak();  // peak := live

 protected:
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_release(void* ptr) = 0;

 private:
  struct Held {
    size_t bytes;
    std::string what;
  };
  std::string describe_largest_locked(int count) const;

  mutable std::mutex mu_;
  uint64_t budget_;
  uint64_t live_ = 0;
  uint64_t peak_ = 0;
  std::map<void*, Held> held_;  // live allocations, for the out-of-budget message
};

}  // namespace tandem::device
