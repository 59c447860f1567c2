#include "tandem/device/cpu_device.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "tandem/core/error.h"
#include "tandem/core/units.h"

namespace tandem::device {

void* CpuDevice::raw_allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) TANDEM_FAIL("the operating system refused ", format_bytes(bytes), " of host memory on ", name());
  return p;
}

void CpuDevice::raw_release(void* ptr) { std::free(ptr); }

std::unique_ptr<AccountedDevice> CpuDevice::host_memory(bool) const {
  return std::make_unique<CpuDevice>(0, index_, "host");
}

void CpuDevice::fill_zero(void* ptr, size_t bytes) { std::memset(ptr, 0, bytes); }

void CpuDevice::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

uint64_t available_host_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

const char* const kUsableHostMemoryRule =
    "its free memory, less 5% (at least 4 GiB) kept for its processes and the system";

uint64_t usable_host_memory(uint64_t available) {
  const uint64_t kept = std::max<uint64_t>(uint64_t{4} << 30, available / 100 * 5);
  return available > kept ? available - kept : 0;
}

uint64_t usable_host_memory() {
  const uint64_t available = available_host_memory();
  return available ? std::max<uint64_t>(1, usable_host_memory(available)) : 0;
}

}  // namespace tandem::device
