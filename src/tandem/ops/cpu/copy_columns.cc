// CPU copy_columns (ops.h): one memcpy a row of the block.
#include <cstring>

#include "tandem/ops/cpu/cpu_ops.h"

namespace tandem::ops::cpu {

void copy_columns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col, int64_t width) {
  const int64_t ws = src.dim(-1), wd = dst.dim(-1), rows = dst.numel() / wd;
  const auto elem = static_cast<int64_t>(dtype_size(dst.dtype()));
  const char* in = static_cast<const char*>(src.raw());  // (rows, ws)
  char* out = static_cast<char*>(dst.raw());             // (rows, wd)
  const auto bytes = static_cast<size_t>(width * elem);
#pragma omp parallel for schedule(static) if (rows * width > (int64_t{1} << 16))
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + (r * wd + dst_col) * elem, in + (r * ws + src_col) * elem, bytes);
}

}  // namespace tandem::ops::cpu
