// Device-side helpers for the CUDA op kernels: fp32 conversion of the storage types, 16-byte packs, warp and block
// reductions with a fixed order (so results do not change from run to run), the dtype switch, deferred errors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/device/cuda/cuda_device.h"

namespace tandem::ops::cuda {

// ---- storage types <-> fp32 (round to nearest even on the way back, overflow to inf) ----

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

// ---- 16-byte packs: one vector load or store moves 4 floats or 8 halves ----

template <class T>
inline constexpr int kPack = 16 / static_cast<int>(sizeof(T));

template <class T>
struct alignas(16) Pack {
  T v[kPack<T>];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- reductions: butterfly within a warp, then the warps' results in warp order ----

struct SumOp {
  template <class V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class V, class Op>
__device__ __forceinline__ V warp_reduce(V v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Every thread of the block must call it; all get the result. `scratch` holds 32 values in shared memory.
template <class V, class Op>
__device__ __forceinline__ V block_reduce(V v, Op op, V identity, V* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call may still be reading scratch[0]
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? scratch[lane] : identity;
    v = warp_reduce(v, op);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

// ---- deferred errors: the first bad value any kernel meets, thrown later by the host ----

__device__ __forceinline__ void report_bad_value(device::DeferredError* slot, uint64_t what, uint64_t hint, int64_t row,
                                                 int64_t value, int64_t limit) {
  if (atomicCAS(&slot->claimed, 0, 1) == 0) {
    slot->row = row;
    slot->value = value;
    slot->limit = limit;
    slot->what = what;
    slot->hint = hint;
  }
}

// ---- host: run f(T{}) with T the storage type of a float dtype ----

template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32:
      f(float{});
      return;
    case DType::BF16:
      f(__nv_bfloat16{});
      return;
    case DType::F16:
      f(__half{});
      return;
    case DType::I32:
    case DType::E4M3:
    case DType::E5M2:
      break;
  }
  TANDEM_FAIL(op, ": dtype ", dtype_name(t), " is not a float dtype (f32, bf16, f16)");
}

}  // namespace tandem::ops::cuda
