// CUDA LayerNorm over the last dim: forward (saving mean and rstd per row) and backward, with fp32 statistics (two
// passes over the row: the variance is not a difference of large sums).
// Packed kernels, when C is a whole number of 16-byte packs and every tensor is 16-byte aligned (the model's
// shapes): forward, one warp per row holding the row in registers (one read of x, one write of y); backward, one
// pass in which each block takes a fixed share of the rows, 256 threads per row, and both writes dx and sums its
// rows' dgamma and dbeta terms into one row of an f32 scratch matrix, which column_sum.cuh's finishing pass adds
// in a fixed order (no atomics: the same bits on every run): norm_backward.cuh, shared with RMSNorm. Other shapes take
// the general kernels: one warp per row with one element per lane, and the parameter gradients as a separate column
// sum. x and y (and dy, dres and dx) may share memory: each element is read before the thread that reads it writes it,
// so no __restrict__ on them.
#include "tandem/ops/cuda/column_sum.cuh"
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/cuda/norm_backward.cuh"
#include "tandem/ops/cuda/workspace.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

// ---- general kernels: any C, any alignment ----

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

// dx = rstd (g - mean(g) - xhat mean(g xhat)) [+ dres], g = dy * gamma: the gradient through the normalisation,
// whose mean and variance both depend on every element of the row. dres (N, C) or null.
template <class T>
__global__ void layernorm_backward_dx_kernel(const T* dy, const T* __restrict__ x, const T* __restrict__ gamma,
                                             const float* __restrict__ mean, const float* __restrict__ rstd,
                                             const T* dres, T* dx, int64_t n, int64_t c) {
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
      float v = rs * (to_f32(gr[j]) * to_f32(gamma[j]) - mean_g - xhat * mean_gx);
      if (dres) v += to_f32(dres[row * c + j]);
      out[j] = from_f32<T>(v);
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

// ---- packed kernels ----

// Forward, one warp per row: lane l holds packs l, l + 32, ..., l + 32 (P - 1) of its row (those below `packs`).
template <class T, int P>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_packed_kernel(const T* x, const T* __restrict__ gamma, const T* __restrict__ beta, T* y,
                                    float* __restrict__ mean, float* __restrict__ rstd, int64_t n, int64_t packs,
                                    float eps) {
  constexpr int V = kPack<T>;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= n) return;  // the whole warp: a row is one warp's
  const float inv_c = 1.0f / static_cast<float>(packs * V);
  const Pack<T>* xr = reinterpret_cast<const Pack<T>*>(x) + row * packs;  // (packs)
  Pack<T> v[P];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t p = lane + 32 * i;
    if (p < packs) {
      v[i] = xr[p];
#pragma unroll
      for (int k = 0; k < V; ++k) sum += to_f32(v[i].v[k]);
    }
  }
  const float mu = warp_reduce(sum, SumOp{}) * inv_c;
  float sq = 0.0f;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (lane + 32 * i < packs) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = to_f32(v[i].v[k]) - mu;
        sq += d * d;
      }
    }
  }
  const float r = 1.0f / sqrtf(warp_reduce(sq, SumOp{}) * inv_c + eps);
  const auto* gp = reinterpret_cast<const Pack<T>*>(gamma);
  const auto* bp = reinterpret_cast<const Pack<T>*>(beta);
  Pack<T>* yr = reinterpret_cast<Pack<T>*>(y) + row * packs;  // (packs)
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t p = lane + 32 * i;
    if (p < packs) {
      const Pack<T> g = gp[p], b = bp[p];
      Pack<T> out;
#pragma unroll
      for (int k = 0; k < V; ++k)
        out.v[k] = from_f32<T>((to_f32(v[i].v[k]) - mu) * r * to_f32(g.v[k]) + to_f32(b.v[k]));
      yr[p] = out;
    }
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
}

// Packs per lane of the packed forward (2, 4, 8 or 16 a lane: C up to 512 packs), or 0 for the general kernel.
int forward_packs_per_lane(int64_t packs) {
  for (int p : {2, 4, 8, 16})
    if (packs <= 32 * p) return p;
  return 0;
}

template <class T, int P>
void launch_forward_packed(const device::CudaDevice& dev, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           const Tensor& y, const Tensor& mean, const Tensor& rstd, int64_t n, int64_t packs,
                           float eps) {
  const auto blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  layernorm_forward_packed_kernel<T, P><<<blocks, kThreads, 0, dev.compute_stream()>>>(
      x.data<T>(), gamma.data<T>(), beta.data<T>(), y.data<T>(), mean.f32(), rstd.f32(), n, packs, eps);
  TANDEM_CUDA_CHECK_LAUNCH();
}

template <class T, int P>
void launch_backward_packed(device::CudaDevice& dev, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                            const Tensor& mean, const Tensor& rstd, const T* dres, const Tensor& dx,
                            const Tensor& dgamma, const Tensor& dbeta, int64_t n, int64_t c) {
  constexpr int R = kNormRowsAtOnce<P>;
  const int64_t packs = c / kPack<T>;
  const int64_t per = layernorm_backward_rows_per_block(n, P);
  const int64_t blocks = (n + per - 1) / per;
  Tensor partial = Tensor::empty({2, blocks, c}, DType::F32, dev, "layernorm_backward scratch");
  norm_backward_packed_kernel<T, P, R, true><<<static_cast<unsigned>(blocks), kThreads, 0, dev.compute_stream()>>>(
      dy.data<T>(), x.data<T>(), gamma.data<T>(), mean.f32(), rstd.f32(), dres, dx.data<T>(), n, packs, per,
      partial.f32());
  TANDEM_CUDA_CHECK_LAUNCH();
  column_finish<2>(dev, partial.f32(), blocks, c, dgamma.f32(), dbeta.f32());
}

void check_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                    const Tensor& rstd, const Tensor* dres, const Tensor& dx, const Tensor& dgamma,
                    const Tensor& dbeta) {
  check_float(op, "x", x);
  for (const Tensor* t : {&dy, &gamma, &dx}) check_dtype(op, "dy, gamma and dx", *t, x.dtype());
  if (dres) check_dtype(op, "dres", *dres, x.dtype());
  for (const Tensor* t : {&mean, &rstd, &dgamma, &dbeta})
    check_dtype(op, "mean, rstd, dgamma and dbeta", *t, DType::F32);
}

// dx = LayerNorm'(dy) [+ dres]; dgamma, dbeta accumulate. dres null: plain backward.
void backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
              const Tensor* dres, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  const int64_t n = rows_of(x), c = cols_of(x);
  if (n == 0 || c == 0) return;
  device::CudaDevice& dev = cuda_device(dx);
  dispatch_float(x.dtype(), "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* res = dres ? dres->data<T>() : nullptr;
    const bool aligned = aligned16(dy.raw()) && aligned16(x.raw()) && aligned16(gamma.raw()) && aligned16(dx.raw()) &&
                         (res == nullptr || aligned16(res));
    const int p = aligned ? layernorm_backward_packs_per_thread(c, sizeof(T)) : 0;
    if (p == 1) {
      launch_backward_packed<T, 1>(dev, dy, x, gamma, mean, rstd, res, dx, dgamma, dbeta, n, c);
    } else if (p == 2) {
      launch_backward_packed<T, 2>(dev, dy, x, gamma, mean, rstd, res, dx, dgamma, dbeta, n, c);
    } else if (p == 4) {
      launch_backward_packed<T, 4>(dev, dy, x, gamma, mean, rstd, res, dx, dgamma, dbeta, n, c);
    } else {
      // Parameter gradients first: dx is written afterwards (stream order), so dx may share memory with dy.
      column_sums<2>(dx, NormGradValues<T>{dy.data<T>(), x.data<T>(), mean.f32(), rstd.f32(), c}, n, c, sizeof(T),
                     dgamma.f32(), dbeta.f32());
      layernorm_backward_dx_kernel<T><<<row_blocks(dev, n), kThreads, 0, dev.compute_stream()>>>(
          dy.data<T>(), x.data<T>(), gamma.data<T>(), mean.f32(), rstd.f32(), res, dx.data<T>(), n, c);
      TANDEM_CUDA_CHECK_LAUNCH();
    }
  });
}

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
    const bool packed = c % kPack<T> == 0 && aligned16(x.raw()) && aligned16(gamma.raw()) && aligned16(beta.raw()) &&
                        aligned16(y.raw());
    const int64_t packs = c / kPack<T>;
    switch (packed ? forward_packs_per_lane(packs) : 0) {
      case 2:
        return launch_forward_packed<T, 2>(dev, x, gamma, beta, y, mean, rstd, n, packs, eps);
      case 4:
        return launch_forward_packed<T, 4>(dev, x, gamma, beta, y, mean, rstd, n, packs, eps);
      case 8:
        return launch_forward_packed<T, 8>(dev, x, gamma, beta, y, mean, rstd, n, packs, eps);
      case 16:
        return launch_forward_packed<T, 16>(dev, x, gamma, beta, y, mean, rstd, n, packs, eps);
      default:
        break;
    }
    layernorm_forward_kernel<T><<<row_blocks(dev, n), kThreads, 0, dev.compute_stream()>>>(
        x.data<T>(), gamma.data<T>(), beta.data<T>(), y.data<T>(), mean.f32(), rstd.f32(), n, c, eps);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  check_backward("layernorm_backward", dy, x, gamma, mean, rstd, nullptr, dx, dgamma, dbeta);
  backward(dy, x, gamma, mean, rstd, nullptr, dx, dgamma, dbeta);
}

void layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                            const Tensor& rstd, const Tensor& dres, const Tensor& dx, const Tensor& dgamma,
                            const Tensor& dbeta) {
  check_backward("layernorm_backward_add", dy, x, gamma, mean, rstd, &dres, dx, dgamma, dbeta);
  backward(dy, x, gamma, mean, rstd, &dres, dx, dgamma, dbeta);
}

}  // namespace tandem::ops::cuda
