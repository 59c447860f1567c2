#include "tandem/device/counting_device.h"

#include <cstring>

namespace tandem::device {

WorkLog& WorkLog::operator+=(const WorkLog& o) {
  gemm_flops += o.gemm_flops;
  gemm_flops_fp32 += o.gemm_flops_fp32;
  gemm_flops_fp8 += o.gemm_flops_fp8;
  grouped_flops += o.grouped_flops;
  attention_flops += o.attention_flops;
  attention_backward_flops += o.attention_backward_flops;
  attention_weighted_flops += o.attention_weighted_flops;
  attention_weighted_backward_flops += o.attention_weighted_backward_flops;
  bytes += o.bytes;
  ops += o.ops;
  for (int i = 0; i < kCommAxes; ++i) {
    comm_calls[i] += o.comm_calls[i];
    comm_bus_bytes[i] += o.comm_bus_bytes[i];
  }
  to_host_bytes += o.to_host_bytes;
  from_host_bytes += o.from_host_bytes;
  return *this;
}

WorkLog& WorkLog::operator-=(const WorkLog& o) {
  WorkLog negative = o;
  negative *= -1.0;
  return *this += negative;
}

WorkLog& WorkLog::operator*=(double k) {
  gemm_flops *= k;
  gemm_flops_fp32 *= k;
  gemm_flops_fp8 *= k;
  grouped_flops *= k;
  attention_flops *= k;
  attention_backward_flops *= k;
  attention_weighted_flops *= k;
  attention_weighted_backward_flops *= k;
  bytes *= k;
  ops *= k;
  for (int i = 0; i < kCommAxes; ++i) {
    comm_calls[i] *= k;
    comm_bus_bytes[i] *= k;
  }
  to_host_bytes *= k;
  from_host_bytes *= k;
  return *this;
}

// Addresses start far from anything real, 64-byte aligned as every device's allocations are.
CountingDevice::CountingDevice(DeviceKind planned, int cpu_threads, int index)
    : AccountedDevice(0, /*name_holders=*/false),
      planned_(planned),
      cpu_threads_(cpu_threads),
      index_(index),
      next_(uintptr_t{1} << 44) {}

void CountingDevice::copy_to_host(void* host_dst, const void*, size_t bytes) { std::memset(host_dst, 0, bytes); }

uint64_t CountingDevice::copy_to_host_async(void*, const void*, size_t bytes, uint64_t) {
  work_.to_host_bytes += static_cast<double>(bytes);
  return 0;
}

uint64_t CountingDevice::copy_from_host_async(void*, const void*, size_t bytes, uint64_t) {
  work_.from_host_bytes += static_cast<double>(bytes);
  return 0;
}

std::unique_ptr<AccountedDevice> CountingDevice::host_memory(bool) const {
  return std::make_unique<CountingDevice>(DeviceKind::Cpu, cpu_threads_, index_);
}

void* CountingDevice::raw_allocate(size_t bytes) {
  void* p = reinterpret_cast<void*>(next_);
  next_ += (bytes + 127) / 64 * 64;  // at least one free line between ranges
  return p;
}

CountingDevice* as_counting(Device& device) {
  return device.kind() == DeviceKind::Counting ? static_cast<CountingDevice*>(&device) : nullptr;
}

}  // namespace tandem::device
