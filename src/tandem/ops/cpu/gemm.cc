// CPU matrix product: matmul through OpenBLAS cblas_sgemm on the 2-D views of its operands.
// OpenBLAS threads partition the output, not the K sum, so results do not depend on its thread count.
#include <cblas.h>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {

void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float beta) {
  const int64_t m = rows_of(c), n = cols_of(c);
  const int64_t k = trans_a ? rows_of(a) : cols_of(a);
  if (m == 0 || n == 0) return;
  float* out = c.f32();  // (M, N)
  if (k == 0) {
    // An empty sum: BLAS implementations disagree on whether they still apply beta, so do it here. beta == 0
    // must not read c (it may hold uninitialised memory), hence the explicit zero fill.
    if (beta == 0.0f) {
      c.fill_zero();
    } else {
      for (int64_t i = 0; i < m * n; ++i) out[i] *= beta;
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a.f32(),
              static_cast<int>(cols_of(a)), b.f32(), static_cast<int>(cols_of(b)), beta, out, static_cast<int>(n));
}

}  // namespace tandem::ops::cpu
