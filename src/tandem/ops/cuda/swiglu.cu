// CUDA SwiGLU on a fused gate|up projection (ops.h): forward and backward with fp32 math. One thread per (row,
// column) pair of gate and up: it reads both before writing, so the backward may run in place (dgate_up = gate_up).
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
    swiglu_forward_kernel<T>
        <<<grid_for(dev, n * f), kThreads, 0, dev.compute_stream()>>>(gate_up.data<T>(), y.data<T>(), n, f);
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
    swiglu_backward_kernel<T><<<grid_for(dev, n * f), kThreads, 0, dev.compute_stream()>>>(
        gate_up.data<T>(), dy.data<T>(), dgate_up.data<T>(), n, f);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
