#include "tandem/device/cuda/pinned_host_device.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "tandem/core/error.h"
#include "tandem/core/units.h"

namespace tandem::device {

void* PinnedHostDevice::raw_allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    TANDEM_FAIL("the CUDA driver could not page-lock ", format_bytes(bytes), " of host memory for ", name(), " (",
                cudaGetErrorString(e),
                "): the host may not have that much free, or its locked-memory limit is lower "
                "(ulimit -l); set the offload's \"pin_memory\": false to use pageable memory");
  }
  return p;
}

void PinnedHostDevice::raw_release(void* ptr) { cudaFreeHost(ptr); }

void PinnedHostDevice::fill_zero(void* ptr, size_t bytes) { std::memset(ptr, 0, bytes); }

void PinnedHostDevice::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

}  // namespace tandem::device
