// Host-side helpers shared by the CUDA op files (.cu and .cc): the device and stream of a tensor, grid sizes and
// dtype checks. No device code here, so g++ compiles it too.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "tandem/core/error.h"
#include "tandem/core/tensor.h"
#include "tandem/device/cuda/cuda_check.h"
#include "tandem/device/cuda/cuda_device.h"

namespace tandem::ops::cuda {

// Threads per block for the grid-stride kernels: 8 warps, a good default on sm_90 for memory-bound loops.
inline constexpr int kThreads = 256;

// The CudaDevice holding `t`, made the current device of this thread (launches go to the current device).
inline device::CudaDevice& cuda_device(const Tensor& t) {
  TANDEM_CHECK(t.device().kind() == DeviceKind::Cuda, "a CUDA op got a tensor on ", t.device().name());
  auto& dev = static_cast<device::CudaDevice&>(t.device());
  dev.make_current();
  return dev;
}

// Blocks for a grid-stride loop over `items`: one item per thread up to a full GPU (8 blocks of 256 threads per SM,
// i.e. 2048 resident threads per SM), then the loop strides.
inline unsigned grid_for(const device::CudaDevice& dev, int64_t items, int threads = kThreads) {
  const int64_t wanted = (std::max<int64_t>(items, 1) + threads - 1) / threads;
  const int64_t full = static_cast<int64_t>(dev.sm_count()) * (2048 / threads);
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, full)));
}

inline bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

inline void check_float(const char* op, const char* name, const Tensor& t) {
  TANDEM_CHECK(is_float(t.dtype()), op, ": ", name, " holds ", dtype_name(t.dtype()), ", expected f32, bf16 or f16");
}

inline void check_dtype(const char* op, const char* name, const Tensor& t, DType want) {
  TANDEM_CHECK(t.dtype() == want, op, ": ", name, " holds ", dtype_name(t.dtype()), ", expected ", dtype_name(want));
}

// A host string literal's address as the kernel argument for DeferredError::what and ::hint.
inline uint64_t host_text(const char* literal) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(literal)); }

}  // namespace tandem::ops::cuda
