// HostBuffer's ownership (host_buffer.h); how the memory is had is in host_buffer_cpu.cc or host_buffer_cuda.cc.
#include "tandem/train/host_buffer.h"

#include <utility>

namespace tandem::train {

HostBuffer::~HostBuffer() { reset(); }

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), pinned_(other.pinned_), free_(std::move(other.free_)) {
  other.data_ = nullptr;
  other.bytes_ = 0;
  other.free_ = nullptr;
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    bytes_ = other.bytes_;
    pinned_ = other.pinned_;
    free_ = std::move(other.free_);
    other.data_ = nullptr;
    other.bytes_ = 0;
    other.free_ = nullptr;
  }
  return *this;
}

void HostBuffer::reset() {
  if (free_) free_();
  free_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace tandem::train
