// LayerNorm forward against a float64 reference, backward against finite differences, in f32 and in the 16-bit
// compute dtypes (statistics and parameter gradients f32); determinism; refused dtypes. The backward with a residual
// gradient added (layernorm_backward_add) the same way, and bitwise against layernorm_backward then add.
#include <gtest/gtest.h>

#include <cmath>

#include "ops_test_util.h"
#include "tandem/ops/op_util.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::numeric_grad;
using testing::randn;
using testing::randn_as;
using testing::rel_error;
using testing::to_double;
using testing::tolerance;
using testing::values;

constexpr double kEps = 1e-5;

// y (N, C) = (x - mean) / sqrt(var + eps) * gamma + beta per row, in double.
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& gamma,
                              const std::vector<double>& beta, int64_t n, int64_t c,
                              std::vector<double>* mean = nullptr, std::vector<double>* rstd = nullptr) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < c; ++j) mu += x[i * c + j];
    mu /= c;
    for (int64_t j = 0; j < c; ++j) var += (x[i * c + j] - mu) * (x[i * c + j] - mu);
    var /= c;
    const double r = 1.0 / std::sqrt(var + kEps);
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = (x[i * c + j] - mu) * r * gamma[j] + beta[j];
    if (mean) mean->push_back(mu);
    if (rstd) rstd->push_back(r);
  }
  return y;
}

struct LayerNormCase {
  Shape shape;  // (..., C)
  int64_t n, c;
};

void PrintTo(const LayerNormCase& p, std::ostream* os) { *os << shape_str(p.shape); }

class OpsLayerNormShapes : public ::testing::TestWithParam<LayerNormCase> {};

TEST_P(OpsLayerNormShapes, ForwardMatchesDouble) {
  const auto [shape, n, c] = GetParam();
  device::CpuDevice dev;
  Tensor x = randn(dev, shape, 1);    // (N, C)
  Tensor gamma = randn(dev, {c}, 2);  // (C)
  Tensor beta = randn(dev, {c}, 3);   // (C)
  Tensor y = Tensor::empty(shape, DType::F32, dev, "y");
  Tensor mean = Tensor::empty({n}, DType::F32, dev, "mean");  // (N)
  Tensor rstd = Tensor::empty({n}, DType::F32, dev, "rstd");  // (N)
  layernorm_forward(x, gamma, beta, y, mean, rstd);
  std::vector<double> want_mean, want_rstd;
  const auto want = reference(to_double(x), to_double(gamma), to_double(beta), n, c, &want_mean, &want_rstd);
  EXPECT_LT(rel_error(to_double(y), want), 1e-6);
  EXPECT_LT(rel_error(to_double(mean), want_mean), 1e-6);
  EXPECT_LT(rel_error(to_double(rstd), want_rstd), 1e-6);
}

TEST_P(OpsLayerNormShapes, BackwardMatchesFiniteDifferences) {
  const auto [shape, n, c] = GetParam();
  device::CpuDevice dev;
  Tensor x = randn(dev, shape, 4);    // (N, C)
  Tensor gamma = randn(dev, {c}, 5);  // (C)
  Tensor beta = randn(dev, {c}, 6);   // (C)
  Tensor dy = randn(dev, shape, 7);   // (N, C)
  Tensor y = Tensor::empty(shape, DType::F32, dev, "y");
  Tensor mean = Tensor::empty({n}, DType::F32, dev, "mean");
  Tensor rstd = Tensor::empty({n}, DType::F32, dev, "rstd");
  layernorm_forward(x, gamma, beta, y, mean, rstd);
  Tensor dx = Tensor::empty(shape, DType::F32, dev, "dx");
  Tensor dgamma = randn(dev, {c}, 8);  // nonzero: accumulates
  Tensor dbeta = randn(dev, {c}, 9);   // nonzero: accumulates
  const auto dgamma0 = to_double(dgamma), dbeta0 = to_double(dbeta);
  layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);

  const auto xd = to_double(x), gd = to_double(gamma), bd = to_double(beta), w = to_double(dy);
  const auto want_dx = numeric_grad([&](const auto& v) { return reference(v, gd, bd, n, c); }, xd, w);
  auto want_dg = numeric_grad([&](const auto& v) { return reference(xd, v, bd, n, c); }, gd, w);
  auto want_db = numeric_grad([&](const auto& v) { return reference(xd, gd, v, n, c); }, bd, w);
  for (int64_t j = 0; j < c; ++j) {
    want_dg[j] += dgamma0[j];
    want_db[j] += dbeta0[j];
  }
  EXPECT_LT(rel_error(to_double(dx), want_dx), 1e-4);
  EXPECT_LT(rel_error(to_double(dgamma), want_dg), 1e-5);
  EXPECT_LT(rel_error(to_double(dbeta), want_db), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsLayerNormShapes,
                         ::testing::Values(LayerNormCase{{7, 13}, 7, 13}, LayerNormCase{{2, 9, 13}, 18, 13},
                                           LayerNormCase{{3, 70}, 3, 70}),
                         [](const ::testing::TestParamInfo<LayerNormCase>& p) {
                           std::string name = "shape";
                           for (int64_t d : p.param.shape) name.append("_").append(std::to_string(d));
                           return name;
                         });

TEST(OpsLayerNorm, BackwardIsBitIdenticalAcrossThreadCounts) {
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  const int64_t n = 401, c = 197;
  ASSERT_TRUE(worth_parallel(n * c, kRowPassCost));  // large enough for the parallel path
  Tensor x = randn(dev, {n, c}, 10);
  Tensor gamma = randn(dev, {c}, 11);
  Tensor beta = randn(dev, {c}, 12);
  Tensor dy = randn(dev, {n, c}, 13);
  Tensor y = Tensor::empty({n, c}, DType::F32, dev, "y");
  Tensor mean = Tensor::empty({n}, DType::F32, dev, "mean");
  Tensor rstd = Tensor::empty({n}, DType::F32, dev, "rstd");
  layernorm_forward(x, gamma, beta, y, mean, rstd);
  Tensor dx[2], dg[2], db[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    dx[run] = Tensor::empty({n, c}, DType::F32, dev, "dx");
    dg[run] = Tensor::zeros({c}, DType::F32, dev, "dgamma");
    db[run] = Tensor::zeros({c}, DType::F32, dev, "dbeta");
    layernorm_backward(dy, x, gamma, mean, rstd, dx[run], dg[run], db[run]);
  }
  EXPECT_TRUE(testing::bit_equal(dx[0], dx[1]));
  EXPECT_TRUE(testing::bit_equal(dg[0], dg[1]));
  EXPECT_TRUE(testing::bit_equal(db[0], db[1]));
}

TEST(OpsLayerNorm, MismatchedGammaThrows) {
  device::CpuDevice dev;
  Tensor x = randn(dev, {7, 13}, 14);
  Tensor y = Tensor::empty({7, 13}, DType::F32, dev, "y");
  Tensor mean = Tensor::empty({7}, DType::F32, dev, "mean");
  Tensor rstd = Tensor::empty({7}, DType::F32, dev, "rstd");
  EXPECT_THROW(layernorm_forward(x, randn(dev, {12}, 15), randn(dev, {13}, 16), y, mean, rstd), Error);
}

class OpsLayerNormDtypes : public ::testing::TestWithParam<DType> {};

// x, gamma, beta, y, dy and dx in the compute dtype; mean, rstd, dgamma and dbeta f32. The f32 outputs are formed
// from exact inputs in fp32 and keep the fp32 bounds; the rounded ones get the dtype's.
TEST_P(OpsLayerNormDtypes, ForwardAndBackwardMatchDoubleOnRoundedInputs) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t n = 6, c = 37;
  Tensor x = randn_as(dev, {2, 3, c}, 21, dt);  // (B, T, C): rows over both leading dims
  Tensor gamma = randn_as(dev, {c}, 22, dt);    // (C)
  Tensor beta = randn_as(dev, {c}, 23, dt);     // (C)
  Tensor dy = randn_as(dev, {2, 3, c}, 24, dt);
  Tensor y = Tensor::empty(x.shape(), dt, dev, "y");
  Tensor mean = Tensor::empty({2, 3}, DType::F32, dev, "mean");
  Tensor rstd = Tensor::empty({2, 3}, DType::F32, dev, "rstd");
  layernorm_forward(x, gamma, beta, y, mean, rstd);
  const auto xd = values(x), gd = values(gamma), bd = values(beta), w = values(dy);
  std::vector<double> want_mean, want_rstd;
  EXPECT_LT(rel_error(values(y), reference(xd, gd, bd, n, c, &want_mean, &want_rstd)), tolerance(dt, 1e-6));
  EXPECT_LT(rel_error(values(mean), want_mean), 1e-6);
  EXPECT_LT(rel_error(values(rstd), want_rstd), 1e-6);

  Tensor dx = Tensor::empty(x.shape(), dt, dev, "dx");
  Tensor dgamma = Tensor::zeros({c}, DType::F32, dev, "dgamma");
  Tensor dbeta = Tensor::zeros({c}, DType::F32, dev, "dbeta");
  layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
  const auto want_dx = numeric_grad([&](const auto& v) { return reference(v, gd, bd, n, c); }, xd, w);
  const auto want_dg = numeric_grad([&](const auto& v) { return reference(xd, v, bd, n, c); }, gd, w);
  const auto want_db = numeric_grad([&](const auto& v) { return reference(xd, gd, v, n, c); }, bd, w);
  EXPECT_LT(rel_error(values(dx), want_dx), tolerance(dt, 1e-4));
  EXPECT_LT(rel_error(values(dgamma), want_dg), 1e-5);
  EXPECT_LT(rel_error(values(dbeta), want_db), 1e-5);
}

TEST_P(OpsLayerNormDtypes, BackwardIsBitIdenticalAcrossThreadCounts) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  const int64_t n = 401, c = 197;
  Tensor x = randn_as(dev, {n, c}, 10, dt);
  Tensor gamma = randn_as(dev, {c}, 11, dt);
  Tensor beta = randn_as(dev, {c}, 12, dt);
  Tensor dy = randn_as(dev, {n, c}, 13, dt);
  Tensor y = Tensor::empty({n, c}, dt, dev, "y");
  Tensor mean = Tensor::empty({n}, DType::F32, dev, "mean");
  Tensor rstd = Tensor::empty({n}, DType::F32, dev, "rstd");
  layernorm_forward(x, gamma, beta, y, mean, rstd);
  Tensor dx[2], dg[2], db[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    dx[run] = Tensor::empty({n, c}, dt, dev, "dx");
    dg[run] = Tensor::zeros({c}, DType::F32, dev, "dgamma");
    db[run] = Tensor::zeros({c}, DType::F32, dev, "dbeta");
    layernorm_backward(dy, x, gamma, mean, rstd, dx[run], dg[run], db[run]);
  }
  EXPECT_TRUE(testing::bit_equal(dx[0], dx[1]));
  EXPECT_TRUE(testing::bit_equal(dg[0], dg[1]));
  EXPECT_TRUE(testing::bit_equal(db[0], db[1]));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsLayerNormDtypes, ::testing::ValuesIn(testing::compute_dtypes()),
                         testing::dtype_label);

// dx = LayerNorm'(dy) + dres: the finite-difference gradient plus dres, dgamma and dbeta accumulating as in the plain
// backward. 16-bit dx gets one more rounding on the CPU (the add): within the dtype's bound.
TEST_P(OpsLayerNormDtypes, BackwardAddMatchesFiniteDifferencesPlusResidual) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t n = 6, c = 37;
  Tensor x = randn_as(dev, {2, 3, c}, 31, dt);
  Tensor gamma = randn_as(dev, {c}, 32, dt);
  Tensor beta = randn_as(dev, {c}, 33, dt);
  Tensor dy = randn_as(dev, {2, 3, c}, 34, dt);
  Tensor dres = randn_as(dev, {2, 3, c}, 35, dt);
  Tensor y = Tensor::empty(x.shape(), dt, dev, "y");
  Tensor mean = Tensor::empty({2, 3}, DType::F32, dev, "mean");
  Tensor rstd = Tensor::empty({2, 3}, DType::F32, dev, "rstd");
  layernorm_forward(x, gamma, beta, y, mean, rstd);
  Tensor dx = Tensor::empty(x.shape(), dt, dev, "dx");
  Tensor dgamma = randn(dev, {c}, 36);  // nonzero: accumulates
  Tensor dbeta = randn(dev, {c}, 37);
  const auto dgamma0 = to_double(dgamma), dbeta0 = to_double(dbeta);
  layernorm_backward_add(dy, x, gamma, mean, rstd, dres, dx, dgamma, dbeta);
  const auto xd = values(x), gd = values(gamma), bd = values(beta), w = values(dy), r = values(dres);
  auto want_dx = numeric_grad([&](const auto& v) { return reference(v, gd, bd, n, c); }, xd, w);
  auto want_dg = numeric_grad([&](const auto& v) { return reference(xd, v, bd, n, c); }, gd, w);
  auto want_db = numeric_grad([&](const auto& v) { return reference(xd, gd, v, n, c); }, bd, w);
  for (size_t i = 0; i < want_dx.size(); ++i) want_dx[i] += r[i];
  for (int64_t j = 0; j < c; ++j) {
    want_dg[j] += dgamma0[j];
    want_db[j] += dbeta0[j];
  }
  EXPECT_LT(rel_error(values(dx), want_dx), tolerance(dt, 1e-4));
  EXPECT_LT(rel_error(values(dgamma), want_dg), 1e-5);
  EXPECT_LT(rel_error(values(dbeta), want_db), 1e-5);
}

// The CPU op is layernorm_backward then add(dx, dres, dx): the same bits, also with dx in dy's memory.
TEST_P(OpsLayerNormDtypes, BackwardAddIsBackwardThenAddBitwise) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t n = 53, c = 70;
  Tensor x = randn_as(dev, {n, c}, 41, dt), gamma = randn_as(dev, {c}, 42, dt), beta = randn_as(dev, {c}, 43, dt);
  Tensor dy = randn_as(dev, {n, c}, 44, dt), dres = randn_as(dev, {n, c}, 45, dt);
  Tensor y = Tensor::empty({n, c}, dt, dev, "y");
  Tensor mean = Tensor::empty({n}, DType::F32, dev, "mean"), rstd = Tensor::empty({n}, DType::F32, dev, "rstd");
  layernorm_forward(x, gamma, beta, y, mean, rstd);
  Tensor want = Tensor::empty({n, c}, dt, dev, "want");
  Tensor want_dg = Tensor::zeros({c}, DType::F32, dev, "dgamma"),
         want_db = Tensor::zeros({c}, DType::F32, dev, "dbeta");
  layernorm_backward(dy, x, gamma, mean, rstd, want, want_dg, want_db);
  add(want, dres, want);
  Tensor dx = testing::copy_of(dev, dy);  // dx in dy's memory
  Tensor dg = Tensor::zeros({c}, DType::F32, dev, "dgamma"), db = Tensor::zeros({c}, DType::F32, dev, "dbeta");
  layernorm_backward_add(dx, x, gamma, mean, rstd, dres, dx, dg, db);
  EXPECT_TRUE(testing::bit_equal(dx, want));
  EXPECT_TRUE(testing::bit_equal(dg, want_dg));
  EXPECT_TRUE(testing::bit_equal(db, want_db));
  EXPECT_HAS(testing::error_of([&] { layernorm_backward_add(dy, x, gamma, mean, rstd, dres, dres, dg, db); }),
             "shares memory with dres");
  EXPECT_HAS(testing::error_of([&] {
               layernorm_backward_add(dy, x, gamma, mean, rstd, randn_as(dev, {n, c + 1}, 46, dt), dx, dg, db);
             }),
             "dres");
}

TEST(OpsLayerNorm, RefusedDtypesThrow) {
  device::CpuDevice dev;
  const DType bf = DType::BF16;
  Tensor x = randn_as(dev, {7, 13}, 14, bf), g = randn_as(dev, {13}, 15, bf), b = randn_as(dev, {13}, 16, bf);
  Tensor y = Tensor::empty({7, 13}, bf, dev, "y");
  Tensor mean = Tensor::empty({7}, DType::F32, dev, "mean"), rstd = Tensor::empty({7}, DType::F32, dev, "rstd");
  Tensor dg = Tensor::zeros({13}, DType::F32, dev, "dgamma"), db = Tensor::zeros({13}, DType::F32, dev, "dbeta");
  layernorm_forward(x, g, b, y, mean, rstd);  // the accepted combination
  layernorm_backward(y, x, g, mean, rstd, y, dg, db);
  EXPECT_THROW(layernorm_forward(x, randn_as(dev, {13}, 17, DType::F16), b, y, mean, rstd), Error);
  EXPECT_THROW(layernorm_forward(x, g, b, Tensor::empty({7, 13}, DType::F32, dev, "y"), mean, rstd), Error);
  EXPECT_THROW(layernorm_forward(x, g, b, y, Tensor::empty({7}, bf, dev, "mean"), rstd), Error);
  EXPECT_THROW(layernorm_backward(y, x, g, mean, rstd, y, Tensor::zeros({13}, bf, dev, "dgamma"), db), Error);
  EXPECT_THROW(layernorm_backward(randn(dev, {7, 13}, 18), x, g, mean, rstd, y, dg, db), Error);
  try {
    layernorm_forward(x, g, b, y, mean, Tensor::empty({7}, bf, dev, "rstd"));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part : {"layernorm_forward", "rstd", "bf16", "f32"})
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tandem::ops
