// PinnedHostDevice: page-locked host memory (cudaMallocHost) as an accounted device of its own, the host side of a
// GPU's offloaded state: the GPU copies it asynchronously at full PCIe speed. Its kind is Cpu, so the ops run on it
// with the CPU kernels (the host AdamW). It holds no GPU memory and runs nothing on a GPU.
#pragma once

#include "tandem/device/accounted_device.h"

namespace tandem::device {

class PinnedHostDevice final : public AccountedDevice {
 public:
  // `index`: the GPU it pairs with, for its name ("host:0 (page-locked)").
  explicit PinnedHostDevice(int index) : AccountedDevice(0), index_(index) {}

  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "host:" + std::to_string(index_) + " (page-locked)"; }
  void fill_zero(void* ptr, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override { copy(host_dst, src, bytes); }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override { copy(dst, host_src, bytes); }
  std::unique_ptr<AccountedDevice> host_memory(bool) const override {
    return std::make_unique<PinnedHostDevice>(index_);
  }

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_release(void* ptr) override;

 private:
  int index_;
};

}  // namespace tandem::device
