// CUDA counter-based dropout (ops.h): each thread draws its elements' keep decisions from their logical indices with
// the same Philox rounds as the host (core/philox.h), so the GPU keeps exactly the elements the CPU keeps.
#include "tandem/core/philox.h"
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

// y (N, C) = x * keep / (1 - p) over the n * c elements; y may be x (each element read, then written, by one thread).
template <class T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, int64_t c, float p, float keep_scale, uint64_t seed,
                               uint64_t stream, int64_t row0, int64_t width, int64_t col0) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n * c; e += stride) {
    const int64_t i = e / c, j = e - i * c;
    const uint64_t index =
        static_cast<uint64_t>(row0 + i) * static_cast<uint64_t>(width) + static_cast<uint64_t>(col0 + j);
    const bool keep = uniform_from_bits(philox_uniform_word(seed, stream, index)) > p;
    y[e] = from_f32<T>(keep ? to_f32(x[e]) * keep_scale : 0.0f);
  }
}

}  // namespace

void dropout(const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t stream, int64_t row0, int64_t width,
             int64_t col0) {
  const char* op = "dropout";
  check_float(op, "x", x);
  check_dtype(op, "y", y, x.dtype());
  const int64_t n = rows_of(x), c = cols_of(x);
  if (n * c == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<grid_for(dev, n * c), kThreads, 0, dev.compute_stream()>>>(
        x.data<T>(), y.data<T>(), n, c, p, 1.0f / (1.0f - p), seed, stream, row0, width, col0);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
