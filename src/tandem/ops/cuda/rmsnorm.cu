// CUDA RMSNorm over the last dim (ops.h): forward (saving rstd per row) and backward. One warp per row with an fp32
// sum of squares; dgamma is a deterministic column sum in two passes (fixed slices of rows per column into scratch,
// then the slices in order: no atomics, the same bits every run). When C is a whole number of 16-byte packs (at most
// 1024 of them) and every tensor is aligned, the backward is LayerNorm's one pass (norm_backward.cuh): each block
// takes a fixed share of the rows, writes dx and sums its rows' dgamma terms into one row of f32 scratch, which
// column_sum.cuh's finishing pass adds in block order. x and y (and dy and dx) may be the same tensor:
// each lane reads an element before it writes the same element, so no __restrict__ on them. rmsnorm_backward_add
// adds a residual gradient dres to dx in fp32 before the one rounding, in both forms.
#include "tandem/ops/cuda/column_sum.cuh"
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/cuda/norm_backward.cuh"
#include "tandem/ops/cuda/scratch_sizes.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

// x, y (N, C) in T; gamma (C) in T; rstd (N) f32.
template <class T>
__global__ void rmsnorm_forward_kernel(const T* x, const T* __restrict__ gamma, T* y, float* __restrict__ rstd,
                                       int64_t n, int64_t c, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); row < n; row += warps) {
    const T* xr = x + row * c;  // (C)
    float sq = 0.0f;
    for (int64_t j = lane; j < c; j += 32) {
      const float v = to_f32(xr[j]);
      sq += v * v;
    }
    const float r = 1.0f / sqrtf(warp_reduce(sq, SumOp{}) * inv_c + eps);
    T* yr = y + row * c;  // (C)
    for (int64_t j = lane; j < c; j += 32) yr[j] = from_f32<T>(rounded<T>(to_f32(xr[j]) * r) * to_f32(gamma[j]));
    if (lane == 0) rstd[row] = r;
  }
}

// dx = rstd (g - xhat mean(g xhat)) [+ dres], g = dy * gamma, xhat = x * rstd. dres (N, C) or null.
template <class T>
__global__ void rmsnorm_backward_dx_kernel(const T* dy, const T* __restrict__ x, const T* __restrict__ gamma,
                                           const float* __restrict__ rstd, const T* __restrict__ dres, T* dx, int64_t n,
                                           int64_t c) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); row < n; row += warps) {
    const T* xr = x + row * c;   // (C)
    const T* gr = dy + row * c;  // (C)
    T* out = dx + row * c;       // (C)
    const float rs = rstd[row];
    float sum_gx = 0.0f;
    for (int64_t j = lane; j < c; j += 32) sum_gx += to_f32(gr[j]) * to_f32(gamma[j]) * (to_f32(xr[j]) * rs);
    const float mean_gx = warp_reduce(sum_gx, SumOp{}) * inv_c;
    for (int64_t j = lane; j < c; j += 32) {
      const float xhat = to_f32(xr[j]) * rs;
      float v = rs * (to_f32(gr[j]) * to_f32(gamma[j]) - xhat * mean_gx);
      if (dres) v += to_f32(dres[row * c + j]);
      out[j] = from_f32<T>(v);
    }
  }
}

// partial[s][col] = sum over rows of slice s, in row order, of dy * round_T(x rstd). Block: 256 columns of one slice.
template <class T>
__global__ void rmsnorm_dgamma_partials_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                               const float* __restrict__ rstd, int64_t n, int64_t c,
                                               float* __restrict__ partial) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t slice = blockIdx.y;
  if (col >= c) return;
  const int64_t r0 = slice * kRmsnormRowsPerSlice;
  const int64_t r1 = r0 + kRmsnormRowsPerSlice < n ? r0 + kRmsnormRowsPerSlice : n;
  float acc = 0.0f;
  for (int64_t r = r0; r < r1; ++r) acc += to_f32(dy[r * c + col]) * rounded<T>(to_f32(x[r * c + col]) * rstd[r]);
  partial[slice * c + col] = acc;
}

// dgamma[col] += sum over slices, in order, of partial[s][col].
__global__ void rmsnorm_dgamma_finish_kernel(const float* __restrict__ partial, int64_t slices, int64_t c,
                                             float* __restrict__ dgamma) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < c; col += stride) {
    float s = 0.0f;
    for (int64_t i = 0; i < slices; ++i) s += partial[i * c + col];
    dgamma[col] += s;
  }
}

template <class T, int P>
void launch_backward_packed(device::CudaDevice& dev, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                            const Tensor& rstd, const T* dres, const Tensor& dx, const Tensor& dgamma, int64_t n,
                            int64_t c) {
  constexpr int R = kNormRowsAtOnce<P>;
  const int64_t packs = c / kPack<T>;
  const int64_t per = layernorm_backward_rows_per_block(n, P);
  const int64_t blocks = (n + per - 1) / per;
  Tensor partial = Tensor::empty({blocks, c}, DType::F32, dev, "rmsnorm_backward dgamma partials");
  TANDEM_CHECK(static_cast<int64_t>(partial.nbytes()) == rmsnorm_backward_scratch_bytes(n, c, sizeof(T)),
               "rmsnorm_backward: scratch size differs from the planner's (scratch_sizes.h)");
  norm_backward_packed_kernel<T, P, R, false><<<static_cast<unsigned>(blocks), kThreads, 0, dev.compute_stream()>>>(
      dy.data<T>(), x.data<T>(), gamma.data<T>(), nullptr, rstd.f32(), dres, dx.data<T>(), n, packs, per,
      partial.f32());
  TANDEM_CUDA_CHECK_LAUNCH();
  column_finish<1>(dev, partial.f32(), blocks, c, dgamma.f32(), nullptr);
}

unsigned row_blocks(const device::CudaDevice& dev, int64_t rows) { return grid_for(dev, rows * 32); }

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd, float eps) {
  const char* op = "rmsnorm_forward";
  check_float(op, "x", x);
  for (const Tensor* t : {&gamma, &y}) check_dtype(op, "gamma and y", *t, x.dtype());
  check_dtype(op, "rstd", rstd, DType::F32);
  const int64_t n = rows_of(x), c = cols_of(x);
  if (n == 0 || c == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_forward_kernel<T><<<row_blocks(dev, n), kThreads, 0, dev.compute_stream()>>>(
        x.data<T>(), gamma.data<T>(), y.data<T>(), rstd.f32(), n, c, eps);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

namespace {

// dx = RMSNorm'(dy) [+ dres]; dgamma accumulates. dres null: the plain backward.
void backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
              const Tensor* dres, const Tensor& dx, const Tensor& dgamma) {
  check_float(op, "x", x);
  for (const Tensor* t : {&dy, &gamma, &dx}) check_dtype(op, "dy, gamma and dx", *t, x.dtype());
  if (dres) check_dtype(op, "dres", *dres, x.dtype());
  for (const Tensor* t : {&rstd, &dgamma}) check_dtype(op, "rstd and dgamma", *t, DType::F32);
  const int64_t n = rows_of(x), c = cols_of(x);
  if (n == 0 || c == 0) return;
  device::CudaDevice& dev = cuda_device(dx);
  const cudaStream_t stream = dev.compute_stream();
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* res = dres ? dres->data<T>() : nullptr;
    bool aligned = !dres || aligned16(dres->raw());
    for (const Tensor* t : {&dy, &x, &gamma, &dx}) aligned = aligned && aligned16(t->raw());
    const int p = aligned ? layernorm_backward_packs_per_thread(c, sizeof(T)) : 0;
    if (p == 1) return launch_backward_packed<T, 1>(dev, dy, x, gamma, rstd, res, dx, dgamma, n, c);
    if (p == 2) return launch_backward_packed<T, 2>(dev, dy, x, gamma, rstd, res, dx, dgamma, n, c);
    if (p == 4) return launch_backward_packed<T, 4>(dev, dy, x, gamma, rstd, res, dx, dgamma, n, c);
    const int64_t slices = rmsnorm_slices(n);
    TANDEM_CHECK(slices <= 65535, op, ": ", n, " rows exceed the dgamma reduction's grid (at most ",
                 65535 * kRmsnormRowsPerSlice, " rows per call)");
    Tensor partial = Tensor::empty({slices, c}, DType::F32, dev, "rmsnorm_backward dgamma partials");
    TANDEM_CHECK(static_cast<int64_t>(partial.nbytes()) == rmsnorm_backward_general_scratch_bytes(n, c), op,
                 ": scratch size differs from the planner's (scratch_sizes.h)");
    // dgamma first: dx is written afterwards (stream order), so dx may be dy.
    const dim3 grid(static_cast<unsigned>((c + kThreads - 1) / kThreads), static_cast<unsigned>(slices));
    rmsnorm_dgamma_partials_kernel<T>
        <<<grid, kThreads, 0, stream>>>(dy.data<T>(), x.data<T>(), rstd.f32(), n, c, partial.f32());
    TANDEM_CUDA_CHECK_LAUNCH();
    rmsnorm_dgamma_finish_kernel<<<grid_for(dev, c), kThreads, 0, stream>>>(partial.f32(), slices, c, dgamma.f32());
    TANDEM_CUDA_CHECK_LAUNCH();
    rmsnorm_backward_dx_kernel<T><<<row_blocks(dev, n), kThreads, 0, stream>>>(
        dy.data<T>(), x.data<T>(), gamma.data<T>(), rstd.f32(), res, dx.data<T>(), n, c);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dgamma) {
  backward("rmsnorm_backward", dy, x, gamma, rstd, nullptr, dx, dgamma);
}

void rmsnorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                          const Tensor& dres, const Tensor& dx, const Tensor& dgamma) {
  backward("rmsnorm_backward_add", dy, x, gamma, rstd, &dres, dx, dgamma);
}

}  // namespace tandem::ops::cuda
