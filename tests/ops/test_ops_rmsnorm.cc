// RMSNorm forward against a float64 reference, backward against finite differences, in f32 and in the 16-bit compute
// dtypes (rstd and dgamma f32); transformers' rounding order in bf16 and f16, bit for bit; in-place use; determinism
// across thread counts; refused shapes and dtypes.
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

// Large enough that a kernel ignoring eps, or adding it in the wrong place, misses the fp32 bound.
constexpr float kEps = 0.05f;

// y (N, C) = x / sqrt(mean(x^2) + eps) * gamma per row, in double.
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& gamma, int64_t n, int64_t c,
                              std::vector<double>* rstd = nullptr) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double sq = 0;
    for (int64_t j = 0; j < c; ++j) sq += x[i * c + j] * x[i * c + j];
    const double r = 1.0 / std::sqrt(sq / static_cast<double>(c) + static_cast<double>(kEps));
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = x[i * c + j] * r * gamma[j];
    if (rstd) rstd->push_back(r);
  }
  return y;
}

struct RmsCase {
  Shape shape;  // (..., C)
  int64_t n, c;
};

void PrintTo(const RmsCase& p, std::ostream* os) { *os << shape_str(p.shape); }

class OpsRmsNormShapes : public ::testing::TestWithParam<RmsCase> {};

TEST_P(OpsRmsNormShapes, ForwardMatchesDouble) {
  const auto [shape, n, c] = GetParam();
  device::CpuDevice dev;
  Tensor x = randn(dev, shape, 1);    // (N, C)
  Tensor gamma = randn(dev, {c}, 2);  // (C)
  Tensor y = Tensor::empty(shape, DType::F32, dev, "y");
  Tensor rstd = Tensor::empty({n}, DType::F32, dev, "rstd");  // (N)
  rmsnorm_forward(x, gamma, y, rstd, kEps);
  std::vector<double> want_rstd;
  const auto want = reference(to_double(x), to_double(gamma), n, c, &want_rstd);
  EXPECT_LT(rel_error(to_double(y), want), 1e-6);
  EXPECT_LT(rel_error(to_double(rstd), want_rstd), 1e-6);
}

TEST_P(OpsRmsNormShapes, BackwardMatchesFiniteDifferences) {
  const auto [shape, n, c] = GetParam();
  device::CpuDevice dev;
  Tensor x = randn(dev, shape, 4);    // (N, C)
  Tensor gamma = randn(dev, {c}, 5);  // (C)
  Tensor dy = randn(dev, shape, 7);   // (N, C)
  Tensor y = Tensor::empty(shape, DType::F32, dev, "y");
  Tensor rstd = Tensor::empty({n}, DType::F32, dev, "rstd");
  rmsnorm_forward(x, gamma, y, rstd, kEps);
  Tensor dx = Tensor::empty(shape, DType::F32, dev, "dx");
  Tensor dgamma = randn(dev, {c}, 8);  // nonzero: accumulates
  const auto dgamma0 = to_double(dgamma);
  rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma);

  const auto xd = to_double(x), gd = to_double(gamma), w = to_double(dy);
  const auto want_dx = numeric_grad([&](const auto& v) { return reference(v, gd, n, c); }, xd, w);
  auto want_dg = numeric_grad([&](const auto& v) { return reference(xd, v, n, c); }, gd, w);
  for (int64_t j = 0; j < c; ++j) want_dg[j] += dgamma0[j];
  EXPECT_LT(rel_error(to_double(dx), want_dx), 1e-4);
  EXPECT_LT(rel_error(to_double(dgamma), want_dg), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsRmsNormShapes,
                         ::testing::Values(RmsCase{{7, 13}, 7, 13}, RmsCase{{2, 9, 13}, 18, 13},
                                           RmsCase{{3, 70}, 3, 70}, RmsCase{{1, 1}, 1, 1}),
                         [](const ::testing::TestParamInfo<RmsCase>& p) {
                           std::string name = "shape";
                           for (int64_t d : p.param.shape) name.append("_").append(std::to_string(d));
                           return name;
                         });

TEST(OpsRmsNorm, InPlaceGivesTheSameBits) {
  device::CpuDevice dev;
  const int64_t n = 5, c = 37;
  Tensor x = randn(dev, {n, c}, 30), gamma = randn(dev, {c}, 31), dy = randn(dev, {n, c}, 32);
  Tensor y = Tensor::empty({n, c}, DType::F32, dev, "y");
  Tensor rstd = Tensor::empty({n}, DType::F32, dev, "rstd"), rstd2 = Tensor::empty({n}, DType::F32, dev, "rstd");
  rmsnorm_forward(x, gamma, y, rstd, kEps);
  Tensor z = testing::copy_of(dev, x);
  rmsnorm_forward(z, gamma, z, rstd2, kEps);  // y is x
  EXPECT_TRUE(testing::bit_equal(y, z));
  EXPECT_TRUE(testing::bit_equal(rstd, rstd2));

  Tensor dx = Tensor::empty({n, c}, DType::F32, dev, "dx");
  Tensor dg = Tensor::zeros({c}, DType::F32, dev, "dgamma"), dg2 = Tensor::zeros({c}, DType::F32, dev, "dgamma");
  rmsnorm_backward(dy, x, gamma, rstd, dx, dg);
  Tensor g = testing::copy_of(dev, dy);
  rmsnorm_backward(g, x, gamma, rstd, g, dg2);  // dx is dy
  EXPECT_TRUE(testing::bit_equal(dx, g));
  EXPECT_TRUE(testing::bit_equal(dg, dg2));
}

TEST(OpsRmsNorm, BackwardIsBitIdenticalAcrossThreadCounts) {
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  const int64_t n = 401, c = 197;
  ASSERT_TRUE(worth_parallel(n * c, kRowPassCost));  // large enough for the parallel path
  Tensor x = randn(dev, {n, c}, 10);
  Tensor gamma = randn(dev, {c}, 11);
  Tensor dy = randn(dev, {n, c}, 13);
  Tensor y = Tensor::empty({n, c}, DType::F32, dev, "y");
  Tensor rstd = Tensor::empty({n}, DType::F32, dev, "rstd");
  rmsnorm_forward(x, gamma, y, rstd, kEps);
  Tensor dx[2], dg[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    dx[run] = Tensor::empty({n, c}, DType::F32, dev, "dx");
    dg[run] = Tensor::zeros({c}, DType::F32, dev, "dgamma");
    rmsnorm_backward(dy, x, gamma, rstd, dx[run], dg[run]);
  }
  EXPECT_TRUE(testing::bit_equal(dx[0], dx[1]));
  EXPECT_TRUE(testing::bit_equal(dg[0], dg[1]));
}

class OpsRmsNormDtypes : public ::testing::TestWithParam<DType> {};

// x, gamma, y, dy and dx in the compute dtype; rstd and dgamma f32. rstd is formed from exact inputs in fp32 and keeps
// the fp32 bound. y and dgamma read the normalised x rounded to the dtype (transformers' order), dx is rounded once.
TEST_P(OpsRmsNormDtypes, ForwardAndBackwardMatchDoubleOnRoundedInputs) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t n = 6, c = 37;
  Tensor x = randn_as(dev, {2, 3, c}, 21, dt);  // (B, T, C): rows over both leading dims
  Tensor gamma = randn_as(dev, {c}, 22, dt);    // (C)
  Tensor dy = randn_as(dev, {2, 3, c}, 24, dt);
  Tensor y = Tensor::empty(x.shape(), dt, dev, "y");
  Tensor rstd = Tensor::empty({2, 3}, DType::F32, dev, "rstd");
  rmsnorm_forward(x, gamma, y, rstd, kEps);
  const auto xd = values(x), gd = values(gamma), w = values(dy);
  std::vector<double> want_rstd;
  EXPECT_LT(rel_error(values(y), reference(xd, gd, n, c, &want_rstd)), tolerance(dt, 1e-6));
  EXPECT_LT(rel_error(values(rstd), want_rstd), 1e-6);

  Tensor dx = Tensor::empty(x.shape(), dt, dev, "dx");
  Tensor dgamma = Tensor::zeros({c}, DType::F32, dev, "dgamma");
  rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma);
  const auto want_dx = numeric_grad([&](const auto& v) { return reference(v, gd, n, c); }, xd, w);
  const auto want_dg = numeric_grad([&](const auto& v) { return reference(xd, v, n, c); }, gd, w);
  EXPECT_LT(rel_error(values(dx), want_dx), tolerance(dt, 1e-4));
  EXPECT_LT(rel_error(values(dgamma), want_dg), tolerance(dt, 1e-5));

  // With a residual gradient: dx gains dres, dgamma accumulates the same terms again.
  Tensor dres = randn_as(dev, {2, 3, c}, 25, dt);
  Tensor dx2 = Tensor::empty(x.shape(), dt, dev, "dx2");
  rmsnorm_backward_add(dy, x, gamma, rstd, dres, dx2, dgamma);
  std::vector<double> want_dx2 = want_dx;
  const auto r = values(dres);
  for (size_t i = 0; i < want_dx2.size(); ++i) want_dx2[i] += r[i];
  EXPECT_LT(rel_error(values(dx2), want_dx2), tolerance(dt, 1e-4));
  std::vector<double> want_dg2 = want_dg;
  for (double& v : want_dg2) v *= 2;
  EXPECT_LT(rel_error(values(dgamma), want_dg2), tolerance(dt, 1e-5));
}

// transformers: hidden = x.float() * rsqrt(mean(x^2) + eps); return weight * hidden.to(input_dtype). So in 16 bits
// y = round(round(x * rstd) * gamma), exactly, from the op's own rstd; a kernel rounding x * rstd * gamma once differs
// on some elements, which the second check makes sure of.
// 16-bit dtypes only: in f32 both roundings are exact.
class OpsRmsNormHalf : public ::testing::TestWithParam<DType> {};

TEST_P(OpsRmsNormHalf, RoundsTheNormalisedInputBeforeTheWeightAsTransformers) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t n = 64, c = 96;
  Tensor x = randn_as(dev, {n, c}, 40, dt, 3.0f);
  Tensor gamma = randn_as(dev, {c}, 41, dt);
  Tensor y = Tensor::empty({n, c}, dt, dev, "y");
  Tensor rstd = Tensor::empty({n}, DType::F32, dev, "rstd");
  rmsnorm_forward(x, gamma, y, rstd, kEps);
  auto round = [&](float v) { return dt == DType::BF16 ? bf16_to_f32(f32_to_bf16(v)) : f16_to_f32(f32_to_f16(v)); };
  const std::vector<float> xv = x.to_host_floats(), gv = gamma.to_host_floats(), yv = y.to_host_floats();
  int64_t mismatches = 0, single_rounding_differs = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const float r = rstd.f32()[i];
      const float want = round(round(xv[i * c + j] * r) * gv[j]);
      mismatches += yv[i * c + j] != want;
      single_rounding_differs += round(xv[i * c + j] * r * gv[j]) != want;
    }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(single_rounding_differs, 0) << "the inputs do not tell the two rounding orders apart";
}

TEST_P(OpsRmsNormDtypes, BackwardIsBitIdenticalAcrossThreadCounts) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  const int64_t n = 401, c = 197;
  Tensor x = randn_as(dev, {n, c}, 10, dt);
  Tensor gamma = randn_as(dev, {c}, 11, dt);
  Tensor dy = randn_as(dev, {n, c}, 13, dt);
  Tensor y = Tensor::empty({n, c}, dt, dev, "y");
  Tensor rstd = Tensor::empty({n}, DType::F32, dev, "rstd");
  rmsnorm_forward(x, gamma, y, rstd, kEps);
  Tensor dx[2], dg[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    dx[run] = Tensor::empty({n, c}, dt, dev, "dx");
    dg[run] = Tensor::zeros({c}, DType::F32, dev, "dgamma");
    rmsnorm_backward(dy, x, gamma, rstd, dx[run], dg[run]);
  }
  EXPECT_TRUE(testing::bit_equal(dx[0], dx[1]));
  EXPECT_TRUE(testing::bit_equal(dg[0], dg[1]));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsRmsNormDtypes, ::testing::ValuesIn(testing::compute_dtypes()),
                         testing::dtype_label);
INSTANTIATE_TEST_SUITE_P(Dtypes, OpsRmsNormHalf, ::testing::Values(DType::BF16, DType::F16), testing::dtype_label);

TEST(OpsRmsNorm, RefusedShapesDtypesAndOverlapsThrow) {
  device::CpuDevice dev;
  const DType bf = DType::BF16;
  Tensor x = randn_as(dev, {7, 13}, 14, bf), g = randn_as(dev, {13}, 15, bf);
  Tensor y = Tensor::empty({7, 13}, bf, dev, "y");
  Tensor rstd = Tensor::empty({7}, DType::F32, dev, "rstd");
  Tensor dg = Tensor::zeros({13}, DType::F32, dev, "dgamma");
  rmsnorm_forward(x, g, y, rstd);  // the accepted combination
  rmsnorm_backward(y, x, g, rstd, y, dg);
  EXPECT_THROW(rmsnorm_forward(x, randn_as(dev, {12}, 16, bf), y, rstd), Error);
  EXPECT_THROW(rmsnorm_forward(x, randn_as(dev, {13}, 17, DType::F16), y, rstd), Error);
  EXPECT_THROW(rmsnorm_forward(x, g, Tensor::empty({7, 13}, DType::F32, dev, "y"), rstd), Error);
  EXPECT_THROW(rmsnorm_forward(x, g, y, Tensor::empty({6}, DType::F32, dev, "rstd")), Error);
  EXPECT_THROW(rmsnorm_forward(x, g, y, rstd, -1.0f), Error);
  EXPECT_THROW(rmsnorm_backward(y, x, g, rstd, y, Tensor::zeros({13}, bf, dev, "dgamma")), Error);
  EXPECT_THROW(rmsnorm_backward(randn(dev, {7, 13}, 18), x, g, rstd, y, dg), Error);
  EXPECT_THROW(rmsnorm_backward(y, x, g, rstd, x, dg), Error);  // dx over x
  Tensor dres = randn_as(dev, {7, 13}, 19, bf);
  EXPECT_THROW(rmsnorm_backward_add(y, x, g, rstd, y, y, dg), Error);                // dx over dres
  EXPECT_THROW(rmsnorm_backward_add(y, x, g, rstd, dres.rows(0, 6), y, dg), Error);  // dres of another shape
  // y over part of x: a row would read elements an earlier row already overwrote.
  Tensor big = randn_as(dev, {8, 13}, 19, bf);
  EXPECT_THROW(rmsnorm_forward(big.rows(0, 7), g, big.rows(1, 7), rstd), Error);
  const std::string msg = testing::error_of([&] { rmsnorm_forward(x, g, y, Tensor::empty({7}, bf, dev, "rstd")); });
  for (const char* part : {"rmsnorm_forward", "rstd", "bf16", "f32"}) EXPECT_HAS(msg, part);
}

}  // namespace
}  // namespace tandem::ops
