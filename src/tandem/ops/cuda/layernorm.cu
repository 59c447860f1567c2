// CUDA LayerNorm over the last dim: forward (saving mean and rstd per row) and backward. One warp per row with
// fp32 statistics (two passes: the variance is not a difference of large sums); dgamma and dbeta are deterministic
// column sums (column_sum.cuh). x and y (and dy and dx) may share memory: each lane reads an element before it
// writes the same element, so no __restrict__ on them.
#include "tandem/ops/cuda/column_sum.cuh"
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

// x, y (N, C) in T; gamma, beta (C) in T; mean, rstd (N) f32.
template <class T>
__global__ void layernorm_forward_kernel(const T* x, const T* __restrict__ gamma, const T* __restrict__ beta, T* y,
                                         float* __restrict__ mean, float* __restrict__ rstd, int64_t n, int64_t c,
                                         float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); row < n; row += warps) {
    const T* xr = x + row * c;  // (C)
    float sum = 0.0f;
    for (int64_t j = lane; j < c; j += 32) sum += to_f32(xr[j]);
    const float mu = warp_reduce(sum, SumOp{}) * inv_c;
    float sq = 0.0f;
    for (int64_t j = lane; j < c; j += 32) {
      const float d = to_f32(xr[j]) - mu;
      sq += d * d;
    }
    const float r = 1.0f / sqrtf(warp_reduce(sq, SumOp{}) * inv_c + eps);
    T* yr = y + row * c;  // (C)
    for (int64_t j = lane; j < c; j += 32)
      yr[j] = from_f32<T>((to_f32(xr[j]) - mu) * r * to_f32(gamma[j]) + to_f32(beta[j]));
    if (lane == 0) {
      mean[row] = mu;
      rstd[row] = r;
    }
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * gamma: the gradient through the normalisation, whose mean
// and variance both depend on every element of the row.
template <class T>
__global__ void layernorm_backward_dx_kernel(const T* dy, const T* __restrict__ x, const T* __restrict__ gamma,
                                             const float* __restrict__ mean, const float* __restrict__ rstd, T* dx,
                                             int64_t n, int64_t c) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); row < n; row += warps) {
    const T* xr = x + row * c;   // (C)
    const T* gr = dy + row * c;  // (C)
    T* out = dx + row * c;       // (C)
    const float mu = mean[row], rs = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t j = lane; j < c; j += 32) {
      const float g = to_f32(gr[j]) * to_f32(gamma[j]);
      sum_g += g;
      sum_gx += g * ((to_f32(xr[j]) - mu) * rs);
    }
    const float mean_g = warp_reduce(sum_g, SumOp{}) * inv_c;
    const float mean_gx = warp_reduce(sum_gx, SumOp{}) * inv_c;
    for (int64_t j = lane; j < c; j += 32) {
      const float xhat = (to_f32(xr[j]) - mu) * rs;
      out[j] = from_f32<T>(rs * (to_f32(gr[j]) * to_f32(gamma[j]) - mean_g - xhat * mean_gx));
    }
  }
}

// f(r, c) for the column sums: {dgamma term, dbeta term} = {dy xhat, dy}.
template <class T>
struct NormGradValues {
  const T* dy;
  const T* x;
  const float* mean;
  const float* rstd;
  int64_t c;
  __device__ ColumnValues<2> operator()(int64_t r, int64_t col) const {
    const float g = to_f32(dy[r * c + col]);
    return {{g * ((to_f32(x[r * c + col]) - mean[r]) * rstd[r]), g}};
  }
};

unsigned row_blocks(const device::CudaDevice& dev, int64_t rows) { return grid_for(dev, rows * 32); }

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, const Tensor& mean,
                       const Tensor& rstd, float eps) {
  const char* op = "layernorm_forward";
  check_float(op, "x", x);
  for (const Tensor* t : {&gamma, &beta, &y}) check_dtype(op, "gamma, beta and y", *t, x.dtype());
  check_dtype(op, "mean", mean, DType::F32);
  check_dtype(op, "rstd", rstd, DType::F32);
  const int64_t n = rows_of(x), c = cols_of(x);
  if (n == 0 || c == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_kernel<T><<<row_blocks(dev, n), kThreads, 0, dev.compute_stream()>>>(
        x.data<T>(), gamma.data<T>(), beta.data<T>(), y.data<T>(), mean.f32(), rstd.f32(), n, c, eps);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  const char* op = "layernorm_backward";
  check_float(op, "x", x);
  for (const Tensor* t : {&dy, &gamma, &dx}) check_dtype(op, "dy, gamma and dx", *t, x.dtype());
  for (const Tensor* t : {&mean, &rstd, &dgamma, &dbeta})
    check_dtype(op, "mean, rstd, dgamma and dbeta", *t, DType::F32);
  const int64_t n = rows_of(x), c = cols_of(x);
  if (n == 0 || c == 0) return;
  device::CudaDevice& dev = cuda_device(dx);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    // Parameter gradients first: dx is written afterwards (stream order), so dx may share memory with dy.
    column_sums<2>(dx, NormGradValues<T>{dy.data<T>(), x.data<T>(), mean.f32(), rstd.f32(), c}, n, c, dgamma.f32(),
                   dbeta.f32());
    layernorm_backward_dx_kernel<T><<<row_blocks(dev, n), kThreads, 0, dev.compute_stream()>>>(
        dy.data<T>(), x.data<T>(), gamma.data<T>(), mean.f32(), rstd.f32(), dx.data<T>(), n, c);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
