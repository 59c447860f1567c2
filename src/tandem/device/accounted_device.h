// AccountedDevice: the budget and the live/peak byte counters shared by every device kind, by purpose (what the
// bytes are for: parameters, activations, ...). Subclasses provide raw memory (CPU: aligned host memory; CUDA:
// planned device arenas; Counting: none).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "tandem/core/device_interface.h"
#include "tandem/device/breakdown.h"

namespace tandem::device {

class AccountedDevice : public Device {
 public:
  // budget_bytes == 0 means no budget. `name_holders`: keep each allocation's name for the out-of-budget message
  // (a device without a budget that only counts can skip it).
  explicit AccountedDevice(uint64_t budget_bytes, bool name_holders = true)
      : budget_(budget_bytes), name_holders_(name_holders) {}

  void* allocate(size_t bytes, std::string_view what) final;
  void release(void* ptr, size_t bytes) final;
  void set_purpose(MemoryPurpose p) final { purpose_ = p; }
  MemoryPurpose purpose() const final { return purpose_; }

  uint64_t live_bytes() const;
  uint64_t peak_bytes() const;
  uint64_t budget_bytes() const { return budget_; }
  void set_budget(uint64_t bytes) { budget_ = bytes; }
  // Bytes a run may plan to hold on this device when no budget is set: 0 when the device sets no limit of its own
  // (host memory); a GPU's memory less what the libraries beside it need.
  virtual uint64_t plannable_bytes() const { return 0; }
  void reset_peak();  // peak := live

  // The host memory that pairs with this device, accounted on its own: where offloaded state lives. `page_locked`:
  // pinned for a GPU's asynchronous copies (a CPU device's host memory is plain either way). A counting device
  // gives a counting host, so the planner accounts host bytes as it does device bytes.
  virtual std::unique_ptr<AccountedDevice> host_memory(bool page_locked) const = 0;

  Breakdown live() const;                           // live bytes by purpose
  MemoryPurpose purpose_of(const void* ptr) const;  // of the live allocation at `ptr`
  Breakdown at_peak() const;                        // what was live at the peak
  // What the device is doing, for the planner's account of its peak: a label ("backward of micro-batch 3, at
  // blocks.2 backward") and how many micro-batches' activations are held; the peak keeps the values set when it
  // was reached.
  void set_label(std::string label, int live_micro_batches);
  std::string label() const;
  int live_micro_batches() const;
  std::string peak_label() const;
  int peak_live_micro_batches() const;

  // While suspended, allocations move the live counts and the window but not the device's peak: the planner
  // probes a chunk's behaviour with allocations the step it accounts does not make.
  void suspend_peak(bool suspended);

  // A second watermark that start_window() resets without touching the device's peak: the highest point since,
  // and what was live then (the planner measures one action at a time with it).
  void start_window();
  uint64_t window_peak() const;
  Breakdown window_at_peak() const;
  std::string window_peak_label() const;
  int window_peak_live_micro_batches() const;

 protected:
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_release(void* ptr) = 0;

 private:
  struct Held {
    size_t bytes;
    MemoryPurpose purpose;
    std::string what;  // empty unless name_holders_
  };
  std::string describe_largest_locked(int count) const;

  mutable std::mutex mu_;
  uint64_t budget_;
  bool name_holders_;
  bool peak_suspended_ = false;
  MemoryPurpose purpose_ = MemoryPurpose::Other;
  uint64_t live_ = 0, peak_ = 0, window_peak_ = 0;
  Breakdown live_by_, at_peak_, window_at_peak_;
  std::string label_, peak_label_, window_peak_label_;
  int live_mbs_ = 0, peak_live_mbs_ = 0, window_peak_live_mbs_ = 0;
  std::unordered_map<void*, Held> held_;  // live allocations
};

}  // namespace tandem::device
