// CUDA reductions: sum_squares of any float dtype, in double, with an order fixed by the element count alone
// (a fixed grid, fixed-order block reductions, one final block), so the result is the same bits on every run.
// sum_squares_total runs the same kernels per tensor and adds each tensor's total into a device double in list
// order (the adds the host loop would do, in the same order: the same bits), then reads it once. The two ops that
// wait for the GPU: they return a host double.
#include <mutex>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/cuda/workspace.h"

namespace tandem::ops::cuda {
namespace {

constexpr int kMaxBlocks = static_cast<int>(kSumSquaresBlocks);

// Per device: the partial sums and a pinned landing place for the result (allocating either per call would cost
// more than the reduction).
struct ReduceContext {
  explicit ReduceContext(device::CudaDevice& dev)
      : partial(Tensor::empty({kSumSquaresScratchBytes / 4}, DType::F32, dev, "sum_squares scratch")),
        result(sizeof(double)) {}
  // kMaxBlocks partial sums, the total, the running sum of sum_squares_total: kMaxBlocks + 2 doubles (tensors have
  // no f64 dtype: twice as many floats).
  Tensor partial;
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

// out[0] = sum of partial[0 .. count), or with `accumulate` out[0] += that sum; count <= 1024: one block of 1024
// threads, one value each.
__global__ void sum_partials_kernel(const double* __restrict__ partial, int count, double* __restrict__ out,
                                    bool accumulate) {
  __shared__ double scratch[32];
  const double v = static_cast<int>(threadIdx.x) < count ? partial[threadIdx.x] : 0.0;
  const double total = block_reduce(v, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) out[0] = accumulate ? out[0] + total : total;
}

// Queues the sum of squares of x (n > 0 elements) into *out, or adds it with `accumulate`. The grid depends only on
// n, so the summation order (and hence the bits) does too. partial: kMaxBlocks doubles.
void queue_sum_squares(const Tensor& x, double* partial, double* out, bool accumulate, cudaStream_t stream) {
  const int64_t n = x.numel();
  const int blocks = static_cast<int>(std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  dispatch_float(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    sum_squares_partial_kernel<T><<<blocks, kThreads, 0, stream>>>(x.data<T>(), n, partial);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
  sum_partials_kernel<<<1, kMaxBlocks, 0, stream>>>(partial, blocks, out, accumulate);
  TANDEM_CUDA_CHECK_LAUNCH();
}

// Copies the double at `src` (device) to the pinned landing place, waits, and returns it.
double read_back(device::CudaDevice& dev, ReduceContext& ctx, const double* src) {
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(ctx.result.data(), src, sizeof(double), cudaMemcpyDeviceToHost, dev.compute_stream()));
  dev.synchronize();
  return *ctx.result.as<double>();
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
  static_assert(sizeof(double) == 2 * sizeof(float));
  double* partial = reinterpret_cast<double*>(ctx.partial.raw());  // kMaxBlocks doubles, the total, the running sum
  queue_sum_squares(x, partial, partial + kMaxBlocks, false, dev.compute_stream());
  return read_back(dev, ctx, partial + kMaxBlocks);
}

double sum_squares_total(const std::vector<Tensor>& xs) {
  TANDEM_CHECK(!xs.empty(), "sum_squares_total: an empty list reached the CUDA backend");
  for (const Tensor& x : xs) check_float("sum_squares_total", "x", x);
  device::CudaDevice& dev = cuda_device(xs[0]);
  ReduceContext& ctx = dev.context<ReduceContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  double* partial = reinterpret_cast<double*>(ctx.partial.raw());
  double* running = partial + kMaxBlocks + 1;
  const cudaStream_t stream = dev.compute_stream();
  TANDEM_CUDA_CHECK(cudaMemsetAsync(running, 0, sizeof(double), stream));  // all-zero bytes: +0.0
  for (const Tensor& x : xs) {
    TANDEM_CHECK(&x.device() == &dev, "sum_squares_total: tensors on ", x.device().name(), " and ", dev.name());
    if (x.numel() > 0) queue_sum_squares(x, partial, running, true, stream);
  }
  return read_back(dev, ctx, running);
}

}  // namespace tandem::ops::cuda
