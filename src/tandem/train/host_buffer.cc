// HostBuffer's ownership and its page-aligned allocation (host_buffer.h); which memory a buffer gets is in
// host_buffer_cpu.cc or host_buffer_cuda.cc.
#include "tandem/train/host_buffer.h"

#include <cstdlib>
#include <utility>

#include "tandem/core/error.h"

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

void HostBuffer::allocate_pageable() {
  constexpr size_t kPage = 4096;
  void* p = std::aligned_alloc(kPage, (bytes_ + kPage - 1) / kPage * kPage);
  if (!p) TANDEM_FAIL("cannot allocate ", bytes_, " bytes of host memory for a checkpoint's copy");
  data_ = static_cast<char*>(p);
  free_ = [p] { std::free(p); };
}

void HostBuffer::reset() {
  if (free_) free_();
  free_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace tandem::train
