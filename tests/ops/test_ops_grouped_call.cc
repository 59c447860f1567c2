// The experts' grouped products as one cuBLAS grouped call describes them (ops/cuda/grouped_call.h), read the way
// cuBLAS documents cublasGemmGroupedBatchedEx (per problem, column-major: C = alpha op(A) op(B) + beta C, op(X)(i, l)
// = X[i + l ld] or, transposed, X[l + i ld]), computed here on the CPU from the pointer steps, against the CPU op:
// both forms of the stack, beta 0 and 1, the weight gradient accumulating, uneven rows with an empty group. Plain
// C++: the mapping is checked without a GPU (the GPU side is bench/gpu/ops_check's moe rows).
#include <gtest/gtest.h>

#include "ops_test_util.h"
#include "tandem/ops/cuda/grouped_call.h"
#include "tandem/ops/ops.h"

namespace tandem::ops::cuda {
namespace {

using device::CpuDevice;
using testing::randn;

const float* at(const PointerStep& s, int64_t group, int64_t first_row) {
  return reinterpret_cast<const float*>(static_cast<const char*>(s.base) + group * s.group_bytes +
                                        first_row * s.row_bytes);
}

// cublasGemmGroupedBatchedEx's documented result for f32 operands, one problem per non-empty group, in double.
void run_as_documented(const GroupedCall& call, const std::vector<int64_t>& rows) {
  const GroupedOperands& o = call.operands;
  int64_t first = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    const int64_t r = rows[g], gi = static_cast<int64_t>(g);
    if (r > 0) {
      const int64_t m = call.m, n = call.rows_are_depth ? call.n : r, k = call.rows_are_depth ? r : call.k;
      const float* a = at(o.a, gi, first);
      const float* b = at(o.b, gi, first);
      float* c = const_cast<float*>(at(o.c, gi, first));
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < m; ++i) {
          double sum = 0;
          for (int64_t l = 0; l < k; ++l) {
            const float av = call.trans_a ? a[l + i * call.lda] : a[i + l * call.lda];
            const float bv = call.trans_b ? b[j + l * call.ldb] : b[l + j * call.ldb];
            sum += static_cast<double>(av) * bv;
          }
          float& cv = c[i + j * call.ldc];
          cv = static_cast<float>(sum + static_cast<double>(call.beta) * cv);
        }
      }
    }
    first += r;
  }
}

const std::vector<int64_t> kRows = {5, 0, 1, 3};  // 9 routed rows, one group empty

void expect_near(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = testing::values(got), w = testing::values(want);
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-4 * (1.0 + std::abs(w[i]))) << i;
}

TEST(GroupedCall, TheMatmulCallIsTheOp) {
  CpuDevice dev;
  const int64_t n = 6, k = 7;
  const Tensor a = randn(dev, {9, k}, 1);
  for (const bool trans_b : {true, false}) {
    for (const float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(::testing::Message() << "trans_b " << trans_b << " beta " << beta);
      const Tensor b = trans_b ? randn(dev, {4, n, k}, 2) : randn(dev, {4, k, n}, 3);
      const Tensor want = randn(dev, {9, n}, 4), got = testing::copy_of(dev, want);
      ops::grouped_matmul(a, b, want, kRows, trans_b, beta);
      run_as_documented(grouped_matmul_call(a, b, got, trans_b, beta), kRows);
      expect_near(got, want);
    }
  }
}

TEST(GroupedCall, TheWeightGradientCallIsTheOpAndAccumulates) {
  CpuDevice dev;
  const int64_t n = 6, k = 7;
  const Tensor dy = randn(dev, {9, n}, 5), x = randn(dev, {9, k}, 6);
  const Tensor want = randn(dev, {4, n, k}, 7), got = testing::copy_of(dev, want);
  ops::grouped_weight_grad(dy, x, want, kRows);
  run_as_documented(grouped_weight_grad_call(dy, x, got), kRows);
  expect_near(got, want);
}

}  // namespace
}  // namespace tandem::ops::cuda
