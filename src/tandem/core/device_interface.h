// The interface every device implements (allocation and identity). Budgets, counters and the CPU, CUDA and
// counting implementations live in tandem/device; core needs only this much so that a Tensor can free itself.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

// Cpu and Cuda hold data; a Counting device holds none and runs no kernel: it accounts what the engine would
// allocate and records the ops it would run (the planner's device, device/counting_device.h).
enum class DeviceKind { Cpu, Cuda, Counting };

// What an allocation is for: the terms in which memory is accounted and predicted.
enum class MemoryPurpose {
  Parameters,     // fp32 values and master copies, and a compute-dtype working copy when it is narrower
  Gradients,      // fp32 gradients: full buffers and owned reduced shards
  Optimizer,      // optimizer state (AdamW moments)
  ZeroBuffers,    // ZeRO's per-layer transients: gathered values (stage 3), full gradients (stages 2, 3)
  Activations,    // allocated in a forward pass: what forward keeps for backward, and its temporaries
  Transient,      // allocated in a backward pass or the loss: gradients in flight, recomputation, op scratch
  Communication,  // pipeline receive buffers
  Other,          // batches, fixed workspaces, anything not in a scope
};
inline constexpr int kMemoryPurposes = 8;
const char* purpose_name(MemoryPurpose p);  // "parameters", "gradients", ...

// A device's queues of work: its compute, its copies to host memory, its copies from host memory.
enum class DeviceQueue { Compute, ToHost, FromHost };

class Device {
 public:
  virtual ~Device() = default;
  // Returns memory for `bytes` bytes (64-byte aligned); `what` names the tensor for error messages.
  virtual void* allocate(size_t bytes, std::string_view what) = 0;
  virtual void release(void* ptr, size_t bytes) = 0;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;  // "cpu:0", "cuda:1"

  // Byte moves on this device's memory, ordered with its compute (on CUDA: its compute stream).
  virtual void fill_zero(void* ptr, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Between this device's memory and host memory; these wait until the bytes have arrived.
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  // Waits until all work queued on this device is done (a no-op on CPU).
  virtual void synchronize() {}

  // Copies between this device and host memory that the host does not wait for: on a GPU they run on two streams of
  // their own, one a direction, so that a copy down and a copy up run at once (overlapping compute when the host
  // memory is page-locked); a CPU copies at once. Copies in one direction run in the order they were issued. Each
  // returns a ticket (0: already done). A copy starts after the device work of the fence `after` (fence(): the work
  // this thread has queued so far; 0: none to wait for). The host memory must stay valid and unchanged, and the device
  // memory alive, until the ticket is done: device_waits(t) makes device work queued afterwards wait for it,
  // host_waits(t) makes the host wait. Safe to call from a second host thread.
  virtual uint64_t fence() { return 0; }
  virtual uint64_t copy_to_host_async(void* host_dst, const void* src, size_t bytes, uint64_t after) {
    copy_to_host(host_dst, src, bytes);
    return 0;
  }
  virtual uint64_t copy_from_host_async(void* dst, const void* host_src, size_t bytes, uint64_t after) {
    copy_from_host(dst, host_src, bytes);
    return 0;
  }
  virtual void device_waits(uint64_t ticket) {}
  virtual void host_waits(uint64_t ticket) {}

  // Timing marks for a timeline: mark() notes when the device reaches this point of one of its queues (the compute
  // stream's, or the copies' to or from host memory, after the device work of the fence `after`, as the next copy
  // would);
  // mark_seconds(m) is that moment on the host's steady clock, in seconds, once the device has got there (it waits).
  // A CPU device marks the host clock at once.
  virtual uint64_t mark(DeviceQueue queue = DeviceQueue::Compute, uint64_t after = 0);
  virtual double mark_seconds(uint64_t mark);

  // The purpose later allocations are accounted under (devices that keep no accounts ignore it).
  virtual void set_purpose(MemoryPurpose) {}
  virtual MemoryPurpose purpose() const { return MemoryPurpose::Other; }
  // False for a device that holds no data (Counting): code that only produces values may skip the work.
  bool holds_data() const { return kind() != DeviceKind::Counting; }
};

inline uint64_t Device::mark(DeviceQueue, uint64_t) {
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}
inline double Device::mark_seconds(uint64_t mark) {
  return std::chrono::duration<double>(std::chrono::steady_clock::duration(static_cast<int64_t>(mark))).count();
}

// Sets the device's purpose for its lifetime, then restores the previous one.
class PurposeScope {
 public:
  PurposeScope(Device& device, MemoryPurpose purpose) : device_(device), saved_(device.purpose()) {
    device_.set_purpose(purpose);
  }
  ~PurposeScope() { device_.set_purpose(saved_); }
  PurposeScope(const PurposeScope&) = delete;
  PurposeScope& operator=(const PurposeScope&) = delete;

 private:
  Device& device_;
  MemoryPurpose saved_;
};

}  // namespace tandem
