// CUDA copy_columns (ops.h): one two-dimensional copy on the compute stream, rows as its height.
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"

namespace tandem::ops::cuda {

void copy_columns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col, int64_t width) {
  const int64_t ws = src.dim(-1), wd = dst.dim(-1), rows = dst.numel() / wd;
  if (rows == 0 || width == 0) return;
  const auto elem = static_cast<size_t>(dtype_size(dst.dtype()));
  device::CudaDevice& dev = cuda_device(dst);
  TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(
      static_cast<char*>(dst.raw()) + static_cast<size_t>(dst_col) * elem, static_cast<size_t>(wd) * elem,
      static_cast<const char*>(src.raw()) + static_cast<size_t>(src_col) * elem, static_cast<size_t>(ws) * elem,
      static_cast<size_t>(width) * elem, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, dev.compute_stream()));
}

}  // namespace tandem::ops::cuda
