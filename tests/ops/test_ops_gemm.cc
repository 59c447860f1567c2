// matmul against a float64 reference: all transpose combinations, beta accumulation, rank-3 views, bad shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "ops_test_util.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::randn;
using testing::rel_error;
using testing::to_double;

// c (M, N) = op(a) op(b) + beta c0 in double; a is (M, K) or (K, M), b is (K, N) or (N, K).
std::vector<double> reference(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& c0,
                              int64_t m, int64_t n, int64_t k, bool ta, bool tb, double beta) {
  std::vector<double> c(static_cast<size_t>(m * n));  // (M, N)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = beta == 0.0 ? 0.0 : beta * c0[i * n + j];
      for (int64_t p = 0; p < k; ++p) s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = s;
    }
  return c;
}

TEST(OpsMatmul, AllTransposeCombinationsMatchDouble) {
  device::CpuDevice dev;
  const int64_t m = 7, n = 5, k = 13;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Tensor a = randn(dev, ta ? Shape{k, m} : Shape{m, k}, 11 + ta);  // (M, K) or (K, M)
      Tensor b = randn(dev, tb ? Shape{n, k} : Shape{k, n}, 21 + tb);  // (K, N) or (N, K)
      Tensor c = Tensor::empty({m, n}, DType::F32, dev, "c");          // (M, N)
      // beta = 0 must not read c: uninitialised memory may hold NaN.
      for (int64_t i = 0; i < c.numel(); ++i) c.f32()[i] = std::nanf("");
      matmul(a, b, c, ta, tb);
      const auto want = reference(to_double(a), to_double(b), {}, m, n, k, ta, tb, 0.0);
      EXPECT_LT(rel_error(to_double(c), want), 1e-6) << "trans_a=" << ta << " trans_b=" << tb;
    }
}

TEST(OpsMatmul, BetaOneAccumulates) {
  device::CpuDevice dev;
  const int64_t m = 9, n = 11, k = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Tensor a = randn(dev, ta ? Shape{k, m} : Shape{m, k}, 31 + ta);  // (M, K) or (K, M)
      Tensor b = randn(dev, tb ? Shape{n, k} : Shape{k, n}, 41 + tb);  // (K, N) or (N, K)
      Tensor c = randn(dev, {m, n}, 51);                               // (M, N)
      const auto c0 = to_double(c);
      matmul(a, b, c, ta, tb, 1.0f);
      const auto want = reference(to_double(a), to_double(b), c0, m, n, k, ta, tb, 1.0);
      EXPECT_LT(rel_error(to_double(c), want), 1e-6) << "trans_a=" << ta << " trans_b=" << tb;
    }
}

TEST(OpsMatmul, HigherRankInputsAreReadAsRowsByLastDim) {
  device::CpuDevice dev;
  Tensor a = randn(dev, {2, 3, 13}, 61);                      // (B, T, K) read as (6, 13)
  Tensor b = randn(dev, {13, 5}, 62);                         // (K, N)
  Tensor c = Tensor::empty({2, 3, 5}, DType::F32, dev, "c");  // (B, T, N)
  matmul(a, b, c, false, false);
  EXPECT_LT(rel_error(to_double(c), reference(to_double(a), to_double(b), {}, 6, 5, 13, false, false, 0.0)), 1e-6);

  // The weight-gradient shape: dW (K, N) = x^T dy over all B*T rows.
  Tensor dw = Tensor::empty({13, 5}, DType::F32, dev, "dw");  // (K, N)
  matmul(a, c, dw, true, false);
  EXPECT_LT(rel_error(to_double(dw), reference(to_double(a), to_double(c), {}, 13, 5, 6, true, false, 0.0)), 1e-6);
}

TEST(OpsMatmul, LargerSizeStaysWithinFp32Accuracy) {
  device::CpuDevice dev;
  const int64_t m = 65, n = 47, k = 257;
  Tensor a = randn(dev, {m, k}, 71);
  Tensor b = randn(dev, {n, k}, 72);
  Tensor c = Tensor::empty({m, n}, DType::F32, dev, "c");
  matmul(a, b, c, false, true);
  // fp32 sums of 257 products: relative error grows like sqrt(K) * 2^-24, about 1e-6.
  EXPECT_LT(rel_error(to_double(c), reference(to_double(a), to_double(b), {}, m, n, k, false, true, 0.0)), 1e-5);
}

TEST(OpsMatmul, EmptyInnerDimensionAppliesBetaOnly) {
  device::CpuDevice dev;
  Tensor a = Tensor::empty({4, 0}, DType::F32, dev, "a");
  Tensor b = Tensor::empty({0, 3}, DType::F32, dev, "b");
  Tensor c = randn(dev, {4, 3}, 81);
  const auto c0 = to_double(c);
  matmul(a, b, c, false, false, 1.0f);
  EXPECT_EQ(to_double(c), c0);
  matmul(a, b, c, false, false, 0.0f);
  for (double x : to_double(c)) EXPECT_EQ(x, 0.0);
}

TEST(OpsMatmul, MismatchedShapesThrowWithShapes) {
  device::CpuDevice dev;
  Tensor a = randn(dev, {7, 13}, 1);
  Tensor b = randn(dev, {12, 5}, 2);
  Tensor c = Tensor::empty({7, 5}, DType::F32, dev, "c");
  try {
    matmul(a, b, c, false, false);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(7, 13)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(12, 5)"), std::string::npos) << e.what();
  }
  // c sharing memory with an input would be read after it is overwritten.
  Tensor sq = randn(dev, {5, 5}, 3);
  EXPECT_THROW(matmul(sq, randn(dev, {5, 5}, 4), sq, false, false), Error);
}

}  // namespace
}  // namespace tandem::ops
