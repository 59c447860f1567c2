// Host memory that a device's tensors are copied into for writing: page-locked (cudaMallocHost, device::PinnedBuffer)
// when the device is a GPU, so that the copy is one DMA at the bus's speed, and plain page-aligned host memory on the
// CPU (or when the GPU's driver cannot pin that much). The build picks host_buffer_cuda.cc or host_buffer_cpu.cc; the
// callers never branch on CUDA. It does not say what goes into the buffer.
#pragma once

#include <cstddef>
#include <functional>

#include "tandem/core/device_interface.h"

namespace tandem::train {

class HostBuffer {
 public:
  HostBuffer() = default;
  // `bytes` of host memory for copies out of `device` (its contents undefined).
  HostBuffer(size_t bytes, const Device& device);
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  char* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  void reset();
  // Plain page-aligned host memory of bytes_ (host_buffer.cc): the CPU's buffer, and the GPU's when pinning fails.
  void allocate_pageable();

  char* data_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
  std::function<void()> free_;  // gives the memory back the way it was had
};

}  // namespace tandem::train
