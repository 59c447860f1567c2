// CpuDevice: one process's host memory as a device, with an optional budget ("device_memory").
#pragma once

#include "tandem/device/accounted_device.h"

namespace tandem::device {

class CpuDevice final : public AccountedDevice {
 public:
  explicit CpuDevice(uint64_t budget_bytes = 0, int index = 0) : AccountedDevice(budget_bytes), index_(index) {}
  ~CpuDevice() override = default;

  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu:" + std::to_string(index_); }
  void fill_zero(void* ptr, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override { copy(host_dst, src, bytes); }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override { copy(dst, host_src, bytes); }

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_release(void* ptr) override;

 private:
  int index_;
};

}  // namespace tandem::device
