// CUDA rotary position embedding (ops.h): the rotate_half rotation of the first `heads` heads of each (b, t) row,
// forward and backward (the transpose: -sin), with fp32 math and f32 cos/sin tables. One thread per rotated pair
// (i, i + D/2), or per 16-byte pack of such pairs (8 halves or 4 floats) when D/2 and the row width are multiples of
// the pack and x and y are aligned: the same formula per element either way, so the same bits. A thread reads both
// elements before writing either, so y may be x. Columns past the rotated heads are copied by a second kernel, only
// when y is not x.
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"

namespace tandem::ops::cuda {
namespace {

struct RotaryDims {
  int64_t rows, t, width;  // B*T rows of W elements, T positions
  int64_t heads, half;     // rotated heads, D/2
};

// x, y (B*T, W) in T; cos, sin (T_max, D/2) f32. sign +1 rotates by R(t), -1 by R(t)^T.
template <class T>
__global__ void rotary_kernel(const T* x, const float* __restrict__ cos, const float* __restrict__ sin, T* y,
                              RotaryDims s, float sign) {
  const int64_t per_row = s.heads * s.half;
  const int64_t total = s.rows * per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t r = e / per_row, rem = e - r * per_row;
    const int64_t h = rem / s.half, i = rem - h * s.half;
    const int64_t pos = r % s.t;
    const int64_t at = r * s.width + h * 2 * s.half + i;  // element i of head h; its partner is D/2 further
    const float c = cos[pos * s.half + i], si = sign * sin[pos * s.half + i];
    const float x1 = to_f32(x[at]), x2 = to_f32(x[at + s.half]);
    y[at] = from_f32<T>(x1 * c - x2 * si);
    y[at + s.half] = from_f32<T>(x2 * c + x1 * si);
  }
}

// The packed form: pack e of the (rows, heads, D/2 / P) packs is pairs [P i, P i + P) of head h of row r.
template <class T>
__global__ void rotary_packed_kernel(const T* x, const float* __restrict__ cos, const float* __restrict__ sin, T* y,
                                     RotaryDims s, float sign) {
  constexpr int P = kPack<T>;
  const int64_t half_packs = s.half / P, per_row = s.heads * half_packs;
  const int64_t total = s.rows * per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t r = e / per_row, rem = e - r * per_row;
    const int64_t h = rem / half_packs, i = (rem - h * half_packs) * P;
    const int64_t pos = r % s.t;
    const int64_t at = r * s.width + h * 2 * s.half + i;  // elements i.. of head h; their partners D/2 further
    const Pack<T> a = *reinterpret_cast<const Pack<T>*>(x + at);
    const Pack<T> b = *reinterpret_cast<const Pack<T>*>(x + at + s.half);
    Pack<T> ya, yb;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const float c = cos[pos * s.half + i + k], si = sign * sin[pos * s.half + i + k];
      const float x1 = to_f32(a.v[k]), x2 = to_f32(b.v[k]);
      ya.v[k] = from_f32<T>(x1 * c - x2 * si);
      yb.v[k] = from_f32<T>(x2 * c + x1 * si);
    }
    *reinterpret_cast<Pack<T>*>(y + at) = ya;
    *reinterpret_cast<Pack<T>*>(y + at + s.half) = yb;
  }
}

// y[r, j] = x[r, j] for the columns j >= first of each row.
template <class T>
__global__ void rotary_copy_rest_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t width,
                                        int64_t first) {
  const int64_t rest = width - first;
  const int64_t total = rows * rest;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t r = e / rest, j = first + (e - r * rest);
    y[r * width + j] = x[r * width + j];
  }
}

void rotary(const char* op, const Tensor& x, const Tensor& cos, const Tensor& sin, int heads, const Tensor& y,
            float sign) {
  check_float(op, "input", x);
  check_dtype(op, "output", y, x.dtype());
  check_dtype(op, "cos", cos, DType::F32);
  check_dtype(op, "sin", sin, DType::F32);
  const int64_t rows = x.dim(0) * x.dim(1);
  if (rows == 0 || x.numel() == 0) return;
  const RotaryDims s{rows, x.dim(1), x.numel() / rows, heads, cos.dim(1)};
  const int64_t rotated = s.heads * 2 * s.half;
  device::CudaDevice& dev = cuda_device(y);
  const cudaStream_t stream = dev.compute_stream();
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int P = kPack<T>;
    const bool packed = s.half % P == 0 && s.width % P == 0 && aligned16(x.raw()) && aligned16(y.raw());
    if (s.heads > 0 && packed) {
      rotary_packed_kernel<T><<<grid_for(dev, rows * s.heads * s.half / P), kThreads, 0, stream>>>(
          x.data<T>(), cos.f32(), sin.f32(), y.data<T>(), s, sign);
      TANDEM_CUDA_CHECK_LAUNCH();
    } else if (s.heads > 0) {
      rotary_kernel<T><<<grid_for(dev, rows * s.heads * s.half), kThreads, 0, stream>>>(
          x.data<T>(), cos.f32(), sin.f32(), y.data<T>(), s, sign);
      TANDEM_CUDA_CHECK_LAUNCH();
    }
    if (x.raw() != y.raw() && rotated < s.width) {
      rotary_copy_rest_kernel<T><<<grid_for(dev, rows * (s.width - rotated)), kThreads, 0, stream>>>(
          x.data<T>(), y.data<T>(), rows, s.width, rotated);
      TANDEM_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace

void rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, int heads, const Tensor& y) {
  rotary("rotary_forward", x, cos, sin, heads, y, 1.0f);
}

void rotary_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, int heads, const Tensor& dx) {
  rotary("rotary_backward", dy, cos, sin, heads, dx, -1.0f);
}

}  // namespace tandem::ops::cuda
