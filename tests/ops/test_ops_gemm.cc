// matmul against a float64 reference: all transpose combinations, beta accumulation, rank-3 views, bad shapes;
// bf16 and f16 operands with c in the same dtype or f32, and the dtype pairs the contract refuses. The linear layer's
// ops (linear_forward, linear_weight_grad) against float64 and, bitwise, against the ops they stand for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ops_test_util.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::from_double_as;
using testing::randn;
using testing::randn_as;
using testing::rel_error;
using testing::to_double;
using testing::tolerance;
using testing::values;

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

// Below 10^6 multiply-adds a row of c depends only on its own row of a, never on how many rows share the call: the
// CPU op pads such a product past that size (cpu/gemm.cc), so every small call runs OpenBLAS's blocked kernel on the
// same row count. Without it OpenBLAS's AVX-512 small-matrix kernels gave one row different bits in calls of 16 and
// 64 rows, and its Haswell kernels (which it picks on AMD Zen 4) differ with every row count. Above the size the
// bits are OpenBLAS's: the same for the same call, but on the Haswell kernels not across row counts. With and without
// b transposed, f32 and bf16 operands, K past OpenBLAS's blocking (1000).
TEST(OpsMatmul, ASmallProductsRowDoesNotDependOnTheRowsBesideIt) {
  device::CpuDevice dev;
  const int64_t rows = 64;
  for (DType dt : {DType::F32, DType::BF16})
    for (const auto& [n, k] :
         std::vector<std::pair<int64_t, int64_t>>{{96, 32}, {32, 32}, {128, 96}, {15, 1000}, {15, 1001}})
      for (int tb = 0; tb < 2; ++tb) {
        ASSERT_LE(rows * n * k, 1000000) << "a product past the size the op pads";
        Tensor a = randn_as(dev, {rows, k}, 91, dt);                            // (M, K)
        Tensor b = randn_as(dev, tb ? Shape{n, k} : Shape{k, n}, 92 + tb, dt);  // (N, K) or (K, N)
        Tensor all = Tensor::empty({rows, n}, DType::F32, dev, "c");            // (M, N)
        matmul(a, b, all, false, tb);
        const std::vector<float> want = all.to_host_floats();
        for (int64_t m : {1, 2, 4, 8, 16, 32, 48}) {
          Tensor part = Tensor::empty({m, n}, DType::F32, dev, "c");  // (m, N)
          matmul(a.rows(0, m), b, part, false, tb);
          const std::vector<float> got = part.to_host_floats();
          EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()))
              << dtype_name(dt) << " n " << n << " k " << k << " trans_b " << tb << ": the first " << m
              << " rows differ from the same rows in a call of " << rows;
        }
      }
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

class OpsMatmulDtypes : public ::testing::TestWithParam<DType> {};

// a and b in the compute dtype; c in it or in f32 (the weight-gradient case); every transpose; beta 0 over a c that
// holds NaN, and beta 1 over c's values read as fp32.
TEST_P(OpsMatmulDtypes, MatchesDoubleOnRoundedInputs) {
  const DType x = GetParam();
  device::CpuDevice dev;
  const int64_t m = 9, n = 6, k = 17;
  for (DType c_dtype : {x, DType::F32})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Tensor a = randn_as(dev, ta ? Shape{k, m} : Shape{m, k}, 11 + ta, x);  // (M, K) or (K, M)
        Tensor b = randn_as(dev, tb ? Shape{n, k} : Shape{k, n}, 21 + tb, x);  // (K, N) or (N, K)
        // An fp32 c gets fp32 accuracy: the inputs are exact in fp32 and nothing is rounded to 16 bits.
        const double tol = c_dtype == DType::F32 ? 1e-5 : tolerance(c_dtype, 1e-5);
        const std::string where = "a, b " + dtype_name(x) + ", c " + dtype_name(c_dtype) +
                                  " trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb);
        Tensor c = from_double_as(dev, {m, n}, std::vector<double>(m * n, std::nan("")), c_dtype);  // (M, N)
        matmul(a, b, c, ta, tb);
        EXPECT_LT(rel_error(values(c), reference(values(a), values(b), {}, m, n, k, ta, tb, 0.0)), tol) << where;

        Tensor acc = randn_as(dev, {m, n}, 51, c_dtype);  // (M, N)
        const auto c0 = values(acc);
        matmul(a, b, acc, ta, tb, 1.0f);
        EXPECT_LT(rel_error(values(acc), reference(values(a), values(b), c0, m, n, k, ta, tb, 1.0)), tol) << where;
      }
}

TEST_P(OpsMatmulDtypes, EmptyInnerDimensionAppliesBetaOnly) {
  const DType x = GetParam();
  device::CpuDevice dev;
  Tensor a = Tensor::empty({4, 0}, x, dev, "a");
  Tensor b = Tensor::empty({0, 3}, x, dev, "b");
  Tensor c = randn_as(dev, {4, 3}, 81, x);
  const auto c0 = values(c);
  matmul(a, b, c, false, false, 1.0f);
  EXPECT_EQ(values(c), c0);
  matmul(a, b, c, false, false, 0.0f);
  for (double v : values(c)) EXPECT_EQ(v, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsMatmulDtypes, ::testing::ValuesIn(testing::compute_dtypes()), testing::dtype_label);

// The fp32 copies of 16-bit operands are scratch from the device allocator, and are given back.
TEST(OpsMatmul, Bf16ScratchGoesThroughTheDevice) {
  device::CpuDevice dev;
  Tensor a = randn_as(dev, {32, 64}, 1, DType::BF16);
  Tensor b = randn_as(dev, {64, 16}, 2, DType::BF16);
  Tensor c = Tensor::empty({32, 16}, DType::BF16, dev, "c");
  const uint64_t live = dev.live_bytes();
  dev.reset_peak();
  matmul(a, b, c, false, false);
  EXPECT_EQ(dev.live_bytes(), live);
  EXPECT_GE(dev.peak_bytes(), live + (a.numel() + b.numel() + c.numel()) * sizeof(float));
}

TEST(OpsMatmul, RefusedDtypesThrowNamingThem) {
  device::CpuDevice dev;
  // Each refused call must name the op and the two dtypes in conflict.
  auto expect_refused = [](const Tensor& a, const Tensor& b, const Tensor& c, const std::string& first,
                           const std::string& second) {
    try {
      matmul(a, b, c, false, false);
      FAIL() << "expected an Error for " << first << " with " << second;
    } catch (const Error& e) {
      const std::string msg = e.what();
      for (const std::string& part : {std::string("matmul"), first, second})
        EXPECT_NE(msg.find(part), std::string::npos) << msg;
    }
  };
  const Tensor bf16 = randn_as(dev, {4, 4}, 1, DType::BF16), f16 = randn_as(dev, {4, 4}, 2, DType::F16);
  const Tensor f32 = randn(dev, {4, 4}, 3);
  const Tensor i32 = Tensor::zeros({4, 4}, DType::I32, dev, "i32");
  auto c_of = [&](DType t) { return Tensor::empty({4, 4}, t, dev, "c"); };
  expect_refused(bf16, f16, c_of(DType::F32), "bf16", "f16");
  expect_refused(f16, bf16, c_of(DType::F16), "f16", "bf16");
  expect_refused(f32, bf16, c_of(DType::F32), "f32", "bf16");
  expect_refused(bf16, bf16, c_of(DType::F16), "c (4, 4) holds f16", "bf16");
  expect_refused(f32, f32, c_of(DType::BF16), "c (4, 4) holds bf16", "f32");
  expect_refused(f32, f32, c_of(DType::I32), "c (4, 4) holds i32", "f32");
  expect_refused(i32, i32, c_of(DType::F32), "a (4, 4) holds i32", "not a compute dtype");
}

// ---- linear_forward and linear_weight_grad ----

// y (N, out) = x (N, in) W^T + bias + residual in double; empty bias or residual vectors leave the term out.
std::vector<double> linear_reference(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& bias, const std::vector<double>& residual, int64_t n,
                                     int64_t in, int64_t out) {
  std::vector<double> y = reference(x, w, {}, n, out, in, false, true, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      if (!bias.empty()) y[i * out + j] += bias[j];
      if (!residual.empty()) y[i * out + j] += residual[i * out + j];
    }
  return y;
}

class OpsLinearDtypes : public ::testing::TestWithParam<DType> {};

// Rank-3 x and y, every combination of the optional bias and residual. The CPU rounds the product, the bias add and
// the residual add each once (up to 3 roundings): the dtype's bound still holds (each costs at most u, ~0.4u seen).
TEST_P(OpsLinearDtypes, ForwardMatchesDoubleWithAndWithoutBiasAndResidual) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t b = 2, t = 3, in = 13, out = 7, n = b * t;
  Tensor x = randn_as(dev, {b, t, in}, 1, dt);     // (B, T, in)
  Tensor w = randn_as(dev, {out, in}, 2, dt);      // (out, in)
  Tensor bias = randn_as(dev, {out}, 3, dt);       // (out)
  Tensor res = randn_as(dev, {b, t, out}, 4, dt);  // (B, T, out)
  for (bool with_bias : {false, true})
    for (bool with_res : {false, true}) {
      Tensor y = from_double_as(dev, {b, t, out}, std::vector<double>(n * out, std::nan("")), dt);
      linear_forward(x, w, with_bias ? bias : Tensor(), with_res ? res : Tensor(), y);
      const auto want = linear_reference(values(x), values(w), with_bias ? values(bias) : std::vector<double>{},
                                         with_res ? values(res) : std::vector<double>{}, n, in, out);
      EXPECT_LT(rel_error(values(y), want), tolerance(dt, 1e-6)) << "bias " << with_bias << " residual " << with_res;
    }
}

// The CPU op is matmul, add_bias and add in that order: the same bits (the models' CPU losses do not move).
TEST_P(OpsLinearDtypes, ForwardIsMatmulThenAddBiasThenAddBitwise) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t n = 37, in = 29, out = 19;
  Tensor x = randn_as(dev, {n, in}, 5, dt), w = randn_as(dev, {out, in}, 6, dt);
  Tensor bias = randn_as(dev, {out}, 7, dt), res = randn_as(dev, {n, out}, 8, dt);
  Tensor y = Tensor::empty({n, out}, dt, dev, "y");
  linear_forward(x, w, bias, res, y);
  Tensor want = Tensor::empty({n, out}, dt, dev, "want");
  matmul(x, w, want, false, true);
  add_bias(want, bias);
  add(want, res, want);
  EXPECT_TRUE(testing::bit_equal(y, want));
}

// dweight += dy^T x and dbias += column sums of dy, both accumulating over what they held; dweight f32 (the
// training case) or in the compute dtype.
TEST_P(OpsLinearDtypes, WeightGradAccumulatesProductAndColumnSums) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t b = 3, t = 5, in = 11, out = 9, n = b * t;
  Tensor dy = randn_as(dev, {b, t, out}, 9, dt);  // (B, T, out)
  Tensor x = randn_as(dev, {b, t, in}, 10, dt);   // (B, T, in)
  for (DType w_dtype : {DType::F32, dt}) {
    Tensor dw = randn_as(dev, {out, in}, 11, w_dtype);  // (out, in), accumulates
    Tensor db = randn(dev, {out}, 12);                  // (out) f32, accumulates
    const auto dw0 = values(dw), db0 = values(db);
    linear_weight_grad(dy, x, dw, db);
    // reference(a = dy as (N, out), b = x as (N, in), trans_a): (out, in) = dy^T x.
    const auto want_dw = reference(values(dy), values(x), dw0, out, in, n, true, false, 1.0);
    std::vector<double> want_db = db0;
    const auto g = values(dy);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < out; ++j) want_db[j] += g[i * out + j];
    const double tol = w_dtype == DType::F32 ? 1e-5 : tolerance(w_dtype, 1e-5);
    EXPECT_LT(rel_error(values(dw), want_dw), tol) << dtype_name(w_dtype);
    EXPECT_LT(rel_error(values(db), want_db), 1e-6) << dtype_name(w_dtype);
  }
  // Without a bias only the product accumulates.
  Tensor dw = randn(dev, {out, in}, 13);
  const auto dw0 = values(dw);
  linear_weight_grad(dy, x, dw, Tensor());
  EXPECT_LT(rel_error(values(dw), reference(values(dy), values(x), dw0, out, in, n, true, false, 1.0)), 1e-5);
}

// The CPU op is matmul with beta 1 then bias_backward: the same bits.
TEST_P(OpsLinearDtypes, WeightGradIsMatmulThenBiasBackwardBitwise) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t n = 41, in = 23, out = 17;
  Tensor dy = randn_as(dev, {n, out}, 14, dt), x = randn_as(dev, {n, in}, 15, dt);
  Tensor dw = randn(dev, {out, in}, 16), db = randn(dev, {out}, 17);
  Tensor want_dw = testing::copy_of(dev, dw), want_db = testing::copy_of(dev, db);
  linear_weight_grad(dy, x, dw, db);
  matmul(dy, x, want_dw, true, false, 1.0f);
  bias_backward(dy, want_db);
  EXPECT_TRUE(testing::bit_equal(dw, want_dw));
  EXPECT_TRUE(testing::bit_equal(db, want_db));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsLinearDtypes, ::testing::ValuesIn(testing::compute_dtypes()), testing::dtype_label);

TEST(OpsLinear, BadShapesDtypesAndOverlapsThrowNamingThem) {
  device::CpuDevice dev;
  const DType bf = DType::BF16;
  Tensor x = randn_as(dev, {6, 5}, 1, bf), w = randn_as(dev, {4, 5}, 2, bf), bias = randn_as(dev, {4}, 3, bf);
  Tensor y = Tensor::empty({6, 4}, bf, dev, "y");
  linear_forward(x, w, bias, Tensor(), y);  // the accepted form
  EXPECT_HAS(testing::error_of([&] {
               linear_forward(x, randn_as(dev, {4, 6}, 4, bf), bias, Tensor(), y);
             }),
             "linear_forward: x (6, 5) and weight (4, 6)");
  EXPECT_HAS(testing::error_of([&] { linear_forward(x, w, randn_as(dev, {5}, 5, bf), Tensor(), y); }), "bias (5)");
  EXPECT_HAS(testing::error_of([&] { linear_forward(x, w, randn(dev, {4}, 6), Tensor(), y); }), "bias");
  EXPECT_HAS(testing::error_of([&] { linear_forward(x, w, bias, randn_as(dev, {6, 5}, 7, bf), y); }), "residual");
  EXPECT_HAS(testing::error_of([&] { linear_forward(x, w, bias, y, y); }), "shares memory with residual");
  Tensor dw = Tensor::zeros({4, 5}, DType::F32, dev, "dw"), db = Tensor::zeros({4}, DType::F32, dev, "db");
  Tensor dy = randn_as(dev, {6, 4}, 8, bf);
  linear_weight_grad(dy, x, dw, db);  // the accepted form
  EXPECT_HAS(testing::error_of([&] { linear_weight_grad(dy, x, dw, Tensor::zeros({4}, bf, dev, "db")); }), "dbias");
  EXPECT_HAS(testing::error_of([&] {
               linear_weight_grad(dy, x, Tensor::zeros({4, 5}, DType::F16, dev, "dw"), db);
             }),
             "dweight (4, 5) holds f16");
  EXPECT_HAS(testing::error_of([&] {
               linear_weight_grad(dy, randn_as(dev, {7, 5}, 9, bf), dw, db);
             }),
             "linear_weight_grad");
}

}  // namespace
}  // namespace tandem::ops
