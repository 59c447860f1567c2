// The interface every device implements (allocation and identity). Budgets, counters and the CPU and
// CUDA implementations live in tandem/device; core needs only this much so that a Tensor can free itself.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem {

enum class DeviceKind { Cpu, Cuda };

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
};

}  // namespace tandem
