// SwiGLU on a fused gate|up projection: forward against a float64 reference, backward against finite differences, in
// f32 and the 16-bit compute dtypes; the halves are not swapped; in-place backward; saturated gates stay finite;
// refused shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "ops_test_util.h"
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

// y (N, F) = silu(gate) * up with gate_up (N, 2F) = [gate | up] per row, in double.
std::vector<double> reference(const std::vector<double>& gate_up, int64_t n, int64_t f) {
  std::vector<double> y(static_cast<size_t>(n * f));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) {
      const double g = gate_up[i * 2 * f + j], u = gate_up[i * 2 * f + f + j];
      y[i * f + j] = g / (1.0 + std::exp(-g)) * u;
    }
  return y;
}

struct SwigluCase {
  Shape gate_up;  // (..., 2F)
  int64_t n, f;
};

void PrintTo(const SwigluCase& p, std::ostream* os) { *os << shape_str(p.gate_up); }

Shape half_shape(Shape s) {
  s.back() /= 2;
  return s;
}

class OpsSwigluShapes : public ::testing::TestWithParam<SwigluCase> {};

TEST_P(OpsSwigluShapes, ForwardMatchesDouble) {
  const auto [shape, n, f] = GetParam();
  device::CpuDevice dev;
  Tensor gu = randn(dev, shape, 1, 2.0f);
  Tensor y = Tensor::empty(half_shape(shape), DType::F32, dev, "y");
  swiglu_forward(gu, y);
  EXPECT_LT(rel_error(to_double(y), reference(to_double(gu), n, f)), 1e-6);
}

TEST_P(OpsSwigluShapes, BackwardMatchesFiniteDifferences) {
  const auto [shape, n, f] = GetParam();
  device::CpuDevice dev;
  Tensor gu = randn(dev, shape, 2, 2.0f);
  Tensor dy = randn(dev, half_shape(shape), 3);
  Tensor dgu = Tensor::empty(shape, DType::F32, dev, "dgate_up");
  swiglu_backward(gu, dy, dgu);
  const auto want = numeric_grad([&](const auto& v) { return reference(v, n, f); }, to_double(gu), to_double(dy));
  EXPECT_LT(rel_error(to_double(dgu), want), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsSwigluShapes,
                         ::testing::Values(SwigluCase{{7, 26}, 7, 13}, SwigluCase{{2, 3, 18}, 6, 9},
                                           SwigluCase{{1, 2}, 1, 1}),
                         [](const ::testing::TestParamInfo<SwigluCase>& p) {
                           std::string name = "shape";
                           for (int64_t d : p.param.gate_up) name.append("_").append(std::to_string(d));
                           return name;
                         });

// gate is the first half: silu(gate) * up, not gate * silu(up).
TEST(OpsSwiglu, GateIsTheFirstHalf) {
  device::CpuDevice dev;
  Tensor gu = Tensor::empty({1, 2}, DType::F32, dev, "gate_up");
  gu.f32()[0] = 2.0f;  // gate
  gu.f32()[1] = 3.0f;  // up
  Tensor y = Tensor::empty({1, 1}, DType::F32, dev, "y");
  swiglu_forward(gu, y);
  EXPECT_NEAR(y.f32()[0], 2.0 / (1.0 + std::exp(-2.0)) * 3.0, 1e-6);  // 5.2848
}

TEST(OpsSwiglu, InPlaceBackwardGivesTheSameBits) {
  device::CpuDevice dev;
  Tensor gu = randn(dev, {5, 34}, 4, 2.0f);
  Tensor dy = randn(dev, {5, 17}, 5);
  Tensor dgu = Tensor::empty(gu.shape(), DType::F32, dev, "dgate_up");
  swiglu_backward(gu, dy, dgu);
  Tensor in_place = testing::copy_of(dev, gu);
  swiglu_backward(in_place, dy, in_place);
  EXPECT_TRUE(testing::bit_equal(dgu, in_place));
}

TEST(OpsSwiglu, SaturatedGatesStayFinite) {
  device::CpuDevice dev;
  Tensor gu = Tensor::empty({1, 4}, DType::F32, dev, "gate_up");
  const float v[4] = {-200.0f, 200.0f, 1.5f, -2.5f};  // gates -200 and 200, ups 1.5 and -2.5
  std::copy(v, v + 4, gu.f32());
  Tensor y = Tensor::empty({1, 2}, DType::F32, dev, "y");
  Tensor dy = Tensor::empty({1, 2}, DType::F32, dev, "dy");
  dy.f32()[0] = dy.f32()[1] = 1.0f;
  Tensor dgu = Tensor::empty({1, 4}, DType::F32, dev, "dgate_up");
  swiglu_forward(gu, y);
  swiglu_backward(gu, dy, dgu);
  EXPECT_EQ(y.f32()[0], 0.0f);  // silu(-200) = -0
  EXPECT_FLOAT_EQ(y.f32()[1], 200.0f * -2.5f);
  EXPECT_EQ(dgu.f32()[0], 0.0f);         // silu'(-200) = 0
  EXPECT_FLOAT_EQ(dgu.f32()[1], -2.5f);  // silu'(200) = 1, times up
  EXPECT_EQ(dgu.f32()[2], 0.0f);         // silu(-200)
  EXPECT_FLOAT_EQ(dgu.f32()[3], 200.0f);
}

class OpsSwigluDtypes : public ::testing::TestWithParam<DType> {};

TEST_P(OpsSwigluDtypes, ForwardAndBackwardMatchDoubleOnRoundedInputs) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t n = 6, f = 37;
  Tensor gu = randn_as(dev, {2, 3, 2 * f}, 6, dt, 2.0f);
  Tensor dy = randn_as(dev, {2, 3, f}, 7, dt);
  Tensor y = Tensor::empty({2, 3, f}, dt, dev, "y");
  swiglu_forward(gu, y);
  EXPECT_LT(rel_error(values(y), reference(values(gu), n, f)), tolerance(dt, 1e-6));
  Tensor dgu = Tensor::empty(gu.shape(), dt, dev, "dgate_up");
  swiglu_backward(gu, dy, dgu);
  const auto want = numeric_grad([&](const auto& v) { return reference(v, n, f); }, values(gu), values(dy));
  EXPECT_LT(rel_error(values(dgu), want), tolerance(dt, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsSwigluDtypes, ::testing::ValuesIn(testing::compute_dtypes()), testing::dtype_label);

TEST(OpsSwiglu, RefusedShapesDtypesAndOverlapsThrow) {
  device::CpuDevice dev;
  Tensor gu = randn(dev, {4, 10}, 8);
  Tensor y = Tensor::empty({4, 5}, DType::F32, dev, "y");
  Tensor dy = randn(dev, {4, 5}, 9);
  Tensor dgu = Tensor::empty({4, 10}, DType::F32, dev, "dgate_up");
  swiglu_forward(gu, y);  // the accepted combinations
  swiglu_backward(gu, dy, dgu);
  EXPECT_THROW(swiglu_forward(randn(dev, {4, 9}, 10), y), Error);  // odd width
  EXPECT_THROW(swiglu_forward(gu, Tensor::empty({4, 10}, DType::F32, dev, "y")), Error);
  EXPECT_THROW(swiglu_forward(gu, Tensor::empty({3, 5}, DType::F32, dev, "y")), Error);
  EXPECT_THROW(swiglu_forward(gu, Tensor::empty({4, 5}, DType::BF16, dev, "y")), Error);
  EXPECT_THROW(swiglu_forward(gu, gu.flat_slice(0, 20, {4, 5})), Error);  // y over gate_up
  EXPECT_THROW(swiglu_backward(gu, dy, Tensor::empty({4, 5}, DType::F32, dev, "dgate_up")), Error);
  EXPECT_THROW(swiglu_backward(gu, gu.flat_slice(20, 20, {4, 5}), gu), Error);  // dgate_up over dy
  const std::string msg = testing::error_of([&] { swiglu_forward(randn(dev, {4, 9}, 11), y); });
  for (const char* part : {"swiglu_forward", "gate_up", "(4, 9)"}) EXPECT_HAS(msg, part);
}

}  // namespace
}  // namespace tandem::ops
