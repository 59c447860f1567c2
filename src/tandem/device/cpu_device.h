// CpuDevice: one process's host memory as a device, with an optional budget ("device_memory").
#pragma once

#include "tandem/device/accounted_device.h"

namespace tandem::device {

class CpuDevice final : public AccountedDevice {
 public:
  // `prefix` names it: "cpu:0" for a device, "host:0" for the host memory that pairs with another device.
  explicit CpuDevice(uint64_t budget_bytes = 0, int index = 0, std::string prefix = "cpu")
      : AccountedDevice(budget_bytes), index_(index), prefix_(std::move(prefix)) {}
  ~CpuDevice() override = default;

  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return prefix_ + ":" + std::to_string(index_); }
  std::unique_ptr<AccountedDevice> host_memory(bool page_locked) const override;
  void fill_zero(void* ptr, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override { copy(host_dst, src, bytes); }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override { copy(dst, host_src, bytes); }

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_release(void* ptr) override;

 private:
  int index_;
  std::string prefix_;
};

// The host memory this machine has available now (MemAvailable in /proc/meminfo), in bytes; 0 when it cannot tell.
uint64_t available_host_memory();
// What offloaded state may take of `available` bytes: 5% of it (at least 4 GiB) stays for what the processes hold
// besides (a CUDA process's runtime, libraries and loaded kernels, about 3 GiB; the page tables of locked memory, 0.2%
// of it) and for what MemAvailable counts but the kernel does not give up. Measured on a host with 125.1 GiB
// available: a process that held 119.9 GiB of offloaded state and 3.3 GiB besides was killed for memory.
uint64_t usable_host_memory(uint64_t available);
// That rule in words, for messages: "its free memory, less 5% (at least 4 GiB) kept for its processes and the system".
extern const char* const kUsableHostMemoryRule;
// usable_host_memory of this machine's available_host_memory(); 0 when it cannot tell.
uint64_t usable_host_memory();

}  // namespace tandem::device
