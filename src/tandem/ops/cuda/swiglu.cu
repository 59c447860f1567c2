// CUDA SwiGLU on a fused gate|up projection (ops.h): forward and backward with fp32 math. One thread per (row,
// column) pair of gate and up, or per 16-byte pack of such pairs (8 halves or 4 floats) where F is a multiple of the
// pack and the pointers are aligned: the same formula per element either way, so the same bits. A thread reads gate
// and up before writing them, so the backward may run in place (dgate_up = gate_up).
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

// 1 / (1 + exp(-g)): for very negative g the exp overflows to inf and the result is 0, as it should be.
__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// gate_up (N, 2F), y (N, F).
template <class T>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate_up, T* __restrict__ y, int64_t n, int64_t f) {
  const int64_t total = n * f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e / f, j = e - i * f;
    const float g = to_f32(gate_up[i * 2 * f + j]), u = to_f32(gate_up[i * 2 * f + f + j]);
    y[e] = from_f32<T>(g * sigmoid(g) * u);
  }
}

// gate_up, dgate_up (N, 2F), dy (N, F). dgate_up may be gate_up.
template <class T>
__global__ void swiglu_backward_kernel(const T* gate_up, const T* __restrict__ dy, T* dgate_up, int64_t n, int64_t f) {
  const int64_t total = n * f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e / f, j = e - i * f;
    const int64_t at = i * 2 * f + j;  // gate; up is F further
    const float g = to_f32(gate_up[at]), u = to_f32(gate_up[at + f]), d = to_f32(dy[e]);
    const float s = sigmoid(g);
    dgate_up[at] = from_f32<T>(d * u * (s * (1.0f + g * (1.0f - s))));  // d silu / dg = s + g s (1 - s)
    dgate_up[at + f] = from_f32<T>(d * g * s);
  }
}

// The packed forms: element e of the (N, F / P) packs is columns [P j, P j + P) of row i.
template <class T>
__global__ void swiglu_forward_packed_kernel(const T* __restrict__ gate_up, T* __restrict__ y, int64_t n, int64_t f) {
  constexpr int P = kPack<T>;
  const int64_t fp = f / P, total = n * fp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e / fp, j = e - i * fp;
    const Pack<T> g = reinterpret_cast<const Pack<T>*>(gate_up + i * 2 * f)[j];
    const Pack<T> u = reinterpret_cast<const Pack<T>*>(gate_up + i * 2 * f + f)[j];
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const float gv = to_f32(g.v[k]), uv = to_f32(u.v[k]);
      out.v[k] = from_f32<T>(gv * sigmoid(gv) * uv);
    }
    reinterpret_cast<Pack<T>*>(y)[e] = out;
  }
}

template <class T>
__global__ void swiglu_backward_packed_kernel(const T* gate_up, const T* __restrict__ dy, T* dgate_up, int64_t n,
                                              int64_t f) {
  constexpr int P = kPack<T>;
  const int64_t fp = f / P, total = n * fp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e / fp, j = e - i * fp;
    const Pack<T> g = reinterpret_cast<const Pack<T>*>(gate_up + i * 2 * f)[j];
    const Pack<T> u = reinterpret_cast<const Pack<T>*>(gate_up + i * 2 * f + f)[j];
    const Pack<T> d = reinterpret_cast<const Pack<T>*>(dy)[e];
    Pack<T> dg, du;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const float gv = to_f32(g.v[k]), uv = to_f32(u.v[k]), dv = to_f32(d.v[k]);
      const float sg = sigmoid(gv);
      dg.v[k] = from_f32<T>(dv * uv * (sg * (1.0f + gv * (1.0f - sg))));
      du.v[k] = from_f32<T>(dv * gv * sg);
    }
    reinterpret_cast<Pack<T>*>(dgate_up + i * 2 * f)[j] = dg;
    reinterpret_cast<Pack<T>*>(dgate_up + i * 2 * f + f)[j] = du;
  }
}

// Packs apply when every row of every operand starts on a 16-byte boundary: F a multiple of the pack, the bases
// aligned (rows of 2F then stay aligned too).
template <class T>
bool packed(int64_t f, std::initializer_list<const void*> bases) {
  if (f % kPack<T> != 0) return false;
  for (const void* p : bases)
    if (!aligned16(p)) return false;
  return true;
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, const Tensor& y) {
  const char* op = "swiglu_forward";
  check_float(op, "gate_up", gate_up);
  check_dtype(op, "y", y, gate_up.dtype());
  const int64_t n = rows_of(y), f = cols_of(y);
  if (n == 0 || f == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  dispatch_float(y.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (packed<T>(f, {gate_up.raw(), y.raw()})) {
      swiglu_forward_packed_kernel<T><<<grid_for(dev, n * f / kPack<T>), kThreads, 0, dev.compute_stream()>>>(
          gate_up.data<T>(), y.data<T>(), n, f);
    } else {
      swiglu_forward_kernel<T>
          <<<grid_for(dev, n * f), kThreads, 0, dev.compute_stream()>>>(gate_up.data<T>(), y.data<T>(), n, f);
    }
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void swiglu_backward(const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up) {
  const char* op = "swiglu_backward";
  check_float(op, "gate_up", gate_up);
  check_dtype(op, "dy", dy, gate_up.dtype());
  check_dtype(op, "dgate_up", dgate_up, gate_up.dtype());
  const int64_t n = rows_of(dy), f = cols_of(dy);
  if (n == 0 || f == 0) return;
  device::CudaDevice& dev = cuda_device(dgate_up);
  dispatch_float(dy.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (packed<T>(f, {gate_up.raw(), dy.raw(), dgate_up.raw()})) {
      swiglu_backward_packed_kernel<T><<<grid_for(dev, n * f / kPack<T>), kThreads, 0, dev.compute_stream()>>>(
          gate_up.data<T>(), dy.data<T>(), dgate_up.data<T>(), n, f);
    } else {
      swiglu_backward_kernel<T><<<grid_for(dev, n * f), kThreads, 0, dev.compute_stream()>>>(
          gate_up.data<T>(), dy.data<T>(), dgate_up.data<T>(), n, f);
    }
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
