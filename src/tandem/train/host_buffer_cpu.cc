// HostBuffer in a build without the CUDA backend: page-aligned host memory.
#include <cstdlib>

#include "tandem/core/error.h"
#include "tandem/train/host_buffer.h"

namespace tandem::train {

HostBuffer::HostBuffer(size_t bytes, const Device&) : bytes_(bytes) {
  if (bytes == 0) return;
  constexpr size_t kPage = 4096;
  void* p = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
  if (!p) TANDEM_FAIL("cannot allocate ", bytes, " bytes of host memory for a checkpoint's copy");
  data_ = static_cast<char*>(p);
  free_ = [p] { std::free(p); };
}

}  // namespace tandem::train
