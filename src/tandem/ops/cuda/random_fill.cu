// CUDA initial values (ops.h random_fill): each thread draws its elements with core/random_fill.h's functions, whose
// double operations are the _rn intrinsics here, so the GPU writes the bits the host draws.
#include "tandem/core/random_fill.h"
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"

namespace tandem::ops::cuda {
namespace {

__global__ void random_fill_kernel(float* out, int64_t n, RandomFill fill) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = random_fill_value(fill, i);
}

}  // namespace

void random_fill(const Tensor& out, const RandomFill& fill) {
  const int64_t n = out.numel();
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(out);
  random_fill_kernel<<<grid_for(dev, n), kThreads, 0, dev.compute_stream()>>>(out.data<float>(), n, fill);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::ops::cuda
