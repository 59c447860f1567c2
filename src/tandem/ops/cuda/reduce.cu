// CUDA reductions: sum_squares of any float dtype, in double, with an order fixed by the element count alone
// (a fixed grid, fixed-order block reductions, one final block), so the result is the same bits on every run.
// The one op that waits for the GPU: it returns a host double.
#include <mutex>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"

namespace tandem::ops::cuda {
namespace {

constexpr int kMaxBlocks = 1024;

// Per device: the partial sums and a pinned landing place for the result (allocating either per call would cost
// more than the reduction).
struct ReduceContext {
  explicit ReduceContext(device::CudaDevice& dev)
      : partial(Tensor::empty({2 * (kMaxBlocks + 1)}, DType::F32, dev, "sum_squares scratch")),
        result(sizeof(double)) {}
  Tensor partial;  // kMaxBlocks + 1 doubles (tensors have no f64 dtype: twice as many floats)
  device::PinnedBuffer result;
  std::mutex mu;  // one sum_squares at a time per device: they share both buffers
};

// partial[block] = sum over this block's grid-stride share of x^2, in double.
template <class T>
__global__ void sum_squares_partial_kernel(const T* __restrict__ x, int64_t n, double* __restrict__ partial) {
  __shared__ double scratch[32];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = to_f32(x[i]);
    acc += v * v;
  }
  acc = block_reduce(acc, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// out[0] = sum of partial[0 .. count), count <= 1024: one block of 1024 threads, one value each.
__global__ void sum_partials_kernel(const double* __restrict__ partial, int count, double* __restrict__ out) {
  __shared__ double scratch[32];
  const double v = static_cast<int>(threadIdx.x) < count ? partial[threadIdx.x] : 0.0;
  const double total = block_reduce(v, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) out[0] = total;
}

}  // namespace

double sum_squares(const Tensor& x) {
  check_float("sum_squares", "x", x);
  device::CudaDevice& dev = cuda_device(x);
  const int64_t n = x.numel();
  if (n == 0) {
    dev.synchronize();  // the contract waits for the device either way (and raises deferred errors)
    return 0.0;
  }
  ReduceContext& ctx = dev.context<ReduceContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  // The grid depends only on n, so the summation order (and hence the bits) does too.
  const int blocks = static_cast<int>(std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  double* partial = reinterpret_cast<double*>(ctx.partial.raw());  // kMaxBlocks doubles, then the total
  static_assert(sizeof(double) == 2 * sizeof(float));
  const cudaStream_t stream = dev.compute_stream();
  dispatch_float(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    sum_squares_partial_kernel<T><<<blocks, kThreads, 0, stream>>>(x.data<T>(), n, partial);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
  sum_partials_kernel<<<1, kMaxBlocks, 0, stream>>>(partial, blocks, partial + kMaxBlocks);
  TANDEM_CUDA_CHECK_LAUNCH();
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(ctx.result.data(), partial + kMaxBlocks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  dev.synchronize();
  return *ctx.result.as<double>();
}

}  // namespace tandem::ops::cuda
