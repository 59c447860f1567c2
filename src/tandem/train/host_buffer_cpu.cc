// HostBuffer in a build without the CUDA backend: page-aligned host memory.
#include "tandem/train/host_buffer.h"

namespace tandem::train {

HostBuffer::HostBuffer(size_t bytes, const Device&) : bytes_(bytes) {
  if (bytes > 0) allocate_pageable();
}

}  // namespace tandem::train
