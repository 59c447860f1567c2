// CUDA RMSNorm per head (ops.h): the first H heads of each row normalised with the q gain, the next Hkv with the k
// gain, the rest of the row copied (copy_columns, only when the output is not the input). One warp per (row, head)
// with an fp32 sum of squares, as rmsnorm.cu's rows. The gains' gradients are deterministic column sums in two passes:
// fixed slices of rows per column into f32 scratch (each slice summing its rows, then its heads, in order), then the
// slices in order; no atomics, the same bits every run. A lane reads an element before it writes the same element, so
// y may be x and dx may be dy (no __restrict__ on them). A head wider than its row (given sums) reads its statistic
// from them in place of the warp's sum; head_norm_sums makes a row's part of them, one warp per (row, head).
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/cuda/norm_backward.cuh"
#include "tandem/ops/cuda/scratch_sizes.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

struct HeadDims {
  int64_t rows, width, d;  // N rows of W elements, heads of D
  int heads, kv_heads;     // H heads with the q gain, then Hkv with the k gain
  __host__ __device__ int normed() const { return heads + kv_heads; }
};

// A whole head's statistic: the sums given (N, H + Hkv) over `width` columns, or none (the head's own D).
struct WholeSums {
  const float* sums = nullptr;
  int64_t width = 0;
};

// x, y (N, W) in T; q_gain, k_gain (D) in T; rstd (N, H + Hkv) f32. Warp item e is head e % (H + Hkv) of row
// e / (H + Hkv).
template <class T>
__global__ void head_norm_forward_kernel(const T* x, const T* __restrict__ q_gain, const T* __restrict__ k_gain, T* y,
                                         float* __restrict__ rstd, HeadDims s, float eps, WholeSums whole) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock, items = s.rows * s.normed();
  const float inv_d = 1.0f / static_cast<float>(whole.sums ? whole.width : s.d);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); e < items; e += warps) {
    const int64_t row = e / s.normed();
    const int h = static_cast<int>(e - row * s.normed());
    const int64_t at = row * s.width + h * s.d;
    const T* g = h < s.heads ? q_gain : k_gain;  // (D)
    float sq = 0.0f;
    for (int64_t j = lane; j < s.d; j += 32) {
      const float v = to_f32(x[at + j]);
      sq += v * v;
    }
    const float total = whole.sums ? whole.sums[e] : warp_reduce(sq, SumOp{});
    const float r = 1.0f / sqrtf(total * inv_d + eps);
    for (int64_t j = lane; j < s.d; j += 32) y[at + j] = from_f32<T>(rounded<T>(to_f32(x[at + j]) * r) * to_f32(g[j]));
    if (lane == 0) rstd[e] = r;
  }
}

// dx = rstd (g - xhat mean(g xhat)) per head, g = dy * gain, xhat = x * rstd.
template <class T>
__global__ void head_norm_backward_dx_kernel(const T* dy, const T* __restrict__ x, const T* __restrict__ q_gain,
                                             const T* __restrict__ k_gain, const float* __restrict__ rstd, T* dx,
                                             HeadDims s, WholeSums whole) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock, items = s.rows * s.normed();
  const float inv_d = 1.0f / static_cast<float>(whole.sums ? whole.width : s.d);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); e < items; e += warps) {
    const int64_t row = e / s.normed();
    const int h = static_cast<int>(e - row * s.normed());
    const int64_t at = row * s.width + h * s.d;
    const T* g = h < s.heads ? q_gain : k_gain;  // (D)
    const float rs = rstd[e];
    float sum_gx = 0.0f;
    for (int64_t j = lane; j < s.d; j += 32) sum_gx += to_f32(dy[at + j]) * to_f32(g[j]) * (to_f32(x[at + j]) * rs);
    // Given sums are of dy * gain * x over the whole head: times rstd, the sum of g xhat.
    const float mean_gx = (whole.sums ? whole.sums[e] * rs : warp_reduce(sum_gx, SumOp{})) * inv_d;
    for (int64_t j = lane; j < s.d; j += 32) {
      const float xhat = to_f32(x[at + j]) * rs;
      dx[at + j] = from_f32<T>(rs * (to_f32(dy[at + j]) * to_f32(g[j]) - xhat * mean_gx));
    }
  }
}

// partial[slice][gain][col] = sum over the rows of the slice, in row order, and over that gain's heads, in head order,
// of dy * round_T(x rstd). gain 0 is q's (heads [0, H)), 1 is k's (heads [H, H + Hkv)). Block: kThreads columns of one
// (slice, gain).
template <class T>
__global__ void head_norm_gain_partials_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                               const float* __restrict__ rstd, HeadDims s,
                                               float* __restrict__ partial) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t slice = blockIdx.y;
  const int gain = static_cast<int>(blockIdx.z);
  if (col >= s.d) return;
  const int64_t r0 = slice * kRmsnormRowsPerSlice;
  const int64_t r1 = r0 + kRmsnormRowsPerSlice < s.rows ? r0 + kRmsnormRowsPerSlice : s.rows;
  const int h0 = gain == 0 ? 0 : s.heads, h1 = gain == 0 ? s.heads : s.normed();
  float acc = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    for (int h = h0; h < h1; ++h) {
      const int64_t at = r * s.width + h * s.d + col;
      acc += to_f32(dy[at]) * rounded<T>(to_f32(x[at]) * rstd[r * s.normed() + h]);
    }
  partial[(slice * 2 + gain) * s.d + col] = acc;
}

// dq_gain[col] += sum over slices, in order, of partial[s][0][col]; dk_gain likewise from partial[s][1].
__global__ void head_norm_gain_finish_kernel(const float* __restrict__ partial, int64_t slices, int64_t d,
                                             float* __restrict__ dq_gain, float* __restrict__ dk_gain) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < 2 * d; c += stride) {
    float sum = 0.0f;
    for (int64_t i = 0; i < slices; ++i) sum += partial[i * 2 * d + c];
    (c < d ? dq_gain : dk_gain)[c % d] += sum;
  }
}

// sums[e] = for warp item e (head e % (H + Hkv) of row e / (H + Hkv)), the sum over the head's D of a * b * gain (1
// without gains), in fp32.
template <class T>
__global__ void head_norm_sums_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ q_gain,
                                      const T* __restrict__ k_gain, float* __restrict__ sums, HeadDims s) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock, items = s.rows * s.normed();
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); e < items; e += warps) {
    const int64_t row = e / s.normed();
    const int h = static_cast<int>(e - row * s.normed());
    const int64_t at = row * s.width + h * s.d;
    const T* g = h < s.heads ? q_gain : k_gain;  // (D) or null
    float sum = 0.0f;
    for (int64_t j = lane; j < s.d; j += 32) sum += to_f32(a[at + j]) * to_f32(b[at + j]) * (g ? to_f32(g[j]) : 1.0f);
    sum = warp_reduce(sum, SumOp{});
    if (lane == 0) sums[e] = sum;
  }
}

HeadDims dims_of(const Tensor& x, int64_t d, int heads, int kv_heads) {
  return {rows_of(x), cols_of(x), d, heads, kv_heads};
}

WholeSums whole_of(const Tensor& sums, int64_t width) {
  return sums.defined() ? WholeSums{sums.f32(), width} : WholeSums{};
}

unsigned item_blocks(const device::CudaDevice& dev, const HeadDims& s) {
  return grid_for(dev, s.rows * s.normed() * 32);
}

// The columns past the normalised heads, from `src` to `dst` unless they are one tensor.
void copy_rest(const Tensor& src, const Tensor& dst, const HeadDims& s) {
  const int64_t first = s.normed() * s.d;
  if (src.raw() != dst.raw() && first < s.width) copy_columns(src, first, dst, first, s.width - first);
}

}  // namespace

void head_norm_forward(const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, int heads, int kv_heads,
                       const Tensor& y, const Tensor& rstd, float eps, const Tensor& sums, int64_t width) {
  const char* op = "head_norm_forward";
  check_float(op, "x", x);
  for (const Tensor* t : {&q_gain, &k_gain, &y}) check_dtype(op, "q_gain, k_gain and y", *t, x.dtype());
  check_dtype(op, "rstd", rstd, DType::F32);
  const HeadDims s = dims_of(x, q_gain.dim(0), heads, kv_heads);
  if (s.rows == 0 || s.width == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  if (s.normed() > 0) {
    dispatch_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      head_norm_forward_kernel<T><<<item_blocks(dev, s), kThreads, 0, dev.compute_stream()>>>(
          x.data<T>(), q_gain.data<T>(), k_gain.data<T>(), y.data<T>(), rstd.f32(), s, eps, whole_of(sums, width));
      TANDEM_CUDA_CHECK_LAUNCH();
    });
  }
  copy_rest(x, y, s);
}

void head_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, int heads,
                        int kv_heads, const Tensor& rstd, const Tensor& dx, const Tensor& dq_gain,
                        const Tensor& dk_gain, const Tensor& sums, int64_t width) {
  const char* op = "head_norm_backward";
  check_float(op, "x", x);
  for (const Tensor* t : {&dy, &q_gain, &k_gain, &dx}) check_dtype(op, "dy, q_gain, k_gain and dx", *t, x.dtype());
  for (const Tensor* t : {&rstd, &dq_gain, &dk_gain}) check_dtype(op, "rstd, dq_gain and dk_gain", *t, DType::F32);
  const HeadDims s = dims_of(x, q_gain.dim(0), heads, kv_heads);
  if (s.rows == 0 || s.width == 0) return;
  device::CudaDevice& dev = cuda_device(dx);
  const cudaStream_t stream = dev.compute_stream();
  if (s.normed() > 0) {
    const int64_t slices = rmsnorm_slices(s.rows);
    TANDEM_CHECK(slices <= 65535, op, ": ", s.rows, " rows exceed the gains' reduction grid (at most ",
                 65535 * kRmsnormRowsPerSlice, " rows per call)");
    Tensor partial = Tensor::empty({slices, 2, s.d}, DType::F32, dev, "head_norm_backward gain partials");
    TANDEM_CHECK(static_cast<int64_t>(partial.nbytes()) == head_norm_backward_scratch_bytes(s.rows, s.d), op,
                 ": scratch size differs from the planner's (scratch_sizes.h)");
    dispatch_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      // The gains first: dx is written afterwards (stream order), so dx may be dy.
      const dim3 grid(static_cast<unsigned>((s.d + kThreads - 1) / kThreads), static_cast<unsigned>(slices), 2);
      head_norm_gain_partials_kernel<T>
          <<<grid, kThreads, 0, stream>>>(dy.data<T>(), x.data<T>(), rstd.f32(), s, partial.f32());
      TANDEM_CUDA_CHECK_LAUNCH();
      head_norm_gain_finish_kernel<<<grid_for(dev, 2 * s.d), kThreads, 0, stream>>>(partial.f32(), slices, s.d,
                                                                                    dq_gain.f32(), dk_gain.f32());
      TANDEM_CUDA_CHECK_LAUNCH();
      head_norm_backward_dx_kernel<T>
          <<<item_blocks(dev, s), kThreads, 0, stream>>>(dy.data<T>(), x.data<T>(), q_gain.data<T>(), k_gain.data<T>(),
                                                         rstd.f32(), dx.data<T>(), s, whole_of(sums, width));
      TANDEM_CUDA_CHECK_LAUNCH();
    });
  }
  copy_rest(dy, dx, s);
}

void head_norm_sums(const Tensor& a, const Tensor& b, const Tensor& q_gain, const Tensor& k_gain, int heads,
                    int kv_heads, int64_t d, const Tensor& sums) {
  const char* op = "head_norm_sums";
  check_float(op, "a", a);
  check_dtype(op, "b", b, a.dtype());
  if (q_gain.defined())
    for (const Tensor* t : {&q_gain, &k_gain}) check_dtype(op, "q_gain and k_gain", *t, a.dtype());
  check_dtype(op, "sums", sums, DType::F32);
  const HeadDims s = dims_of(a, d, heads, kv_heads);
  if (s.rows == 0 || s.normed() == 0) return;
  device::CudaDevice& dev = cuda_device(sums);
  dispatch_float(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* gq = q_gain.defined() ? q_gain.data<T>() : nullptr;
    const T* gk = k_gain.defined() ? k_gain.data<T>() : nullptr;
    head_norm_sums_kernel<T>
        <<<item_blocks(dev, s), kThreads, 0, dev.compute_stream()>>>(a.data<T>(), b.data<T>(), gq, gk, sums.f32(), s);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
