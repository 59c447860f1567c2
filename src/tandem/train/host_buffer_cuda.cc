// HostBuffer in a build with the CUDA backend: page-locked through device::PinnedBuffer for a GPU's copies, plain
// page-aligned memory for the CPU's and when the driver cannot pin the size asked (it then stays correct, only the
// copy out of the GPU is slower).
#include "tandem/core/error.h"
#include "tandem/device/cuda/cuda_device.h"
#include "tandem/train/host_buffer.h"

namespace tandem::train {

HostBuffer::HostBuffer(size_t bytes, const Device& device) : bytes_(bytes) {
  if (bytes == 0) return;
  if (device.kind() == DeviceKind::Cuda) {
    try {
      auto* pinned = new device::PinnedBuffer(bytes);
      data_ = pinned->as<char>();
      pinned_ = true;
      free_ = [pinned] { delete pinned; };
      return;
    } catch (const Error&) {
      // Too much to pin: fall through to pageable memory.
    }
  }
  allocate_pageable();
}

}  // namespace tandem::train
