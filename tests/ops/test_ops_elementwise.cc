// Bias, add, axpy, scale, ReLU and GELU against float64 references and finite differences; casts; determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "ops_test_util.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::numeric_grad;
using testing::randn;
using testing::rel_error;
using testing::to_double;

constexpr int64_t kN = 7, kC = 13;

TEST(OpsBias, ForwardMatchesDouble) {
  device::CpuDevice dev;
  Tensor y = randn(dev, {kN, kC}, 1);  // (N, C)
  Tensor b = randn(dev, {kC}, 2);      // (C)
  auto want = to_double(y);            // (N, C)
  const auto bd = to_double(b);
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t j = 0; j < kC; ++j) want[i * kC + j] += bd[j];
  add_bias(y, b);
  EXPECT_LT(rel_error(to_double(y), want), 1e-6);
}

TEST(OpsBias, BackwardMatchesFiniteDifferencesAndAccumulates) {
  device::CpuDevice dev;
  Tensor x = randn(dev, {2, 5, kC}, 3);   // (B, T, C): rows over both leading dims
  Tensor b = randn(dev, {kC}, 4);         // (C)
  Tensor dy = randn(dev, {2, 5, kC}, 5);  // (B, T, C)
  const auto xd = to_double(x);
  auto f = [&](const std::vector<double>& bias) {
    std::vector<double> y = xd;
    for (size_t i = 0; i < y.size(); ++i) y[i] += bias[i % kC];
    return y;
  };
  const auto want = numeric_grad(f, to_double(b), to_double(dy));
  Tensor db = randn(dev, {kC}, 6);  // (C), nonzero: the op accumulates
  auto expect = to_double(db);
  for (size_t j = 0; j < expect.size(); ++j) expect[j] += want[j];
  bias_backward(dy, db);
  EXPECT_LT(rel_error(to_double(db), expect), 1e-5);
}

TEST(OpsBias, BackwardIsBitIdenticalAcrossThreadCounts) {
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  Tensor dy = randn(dev, {301, 197}, 7);  // (N, C): large enough for the parallel path
  Tensor db1 = Tensor::zeros({197}, DType::F32, dev, "db1");
  Tensor db2 = Tensor::zeros({197}, DType::F32, dev, "db2");
  omp_set_num_threads(1);
  bias_backward(dy, db1);
  omp_set_num_threads(2);
  bias_backward(dy, db2);
  EXPECT_TRUE(testing::bit_equal(db1, db2));
}

TEST(OpsElementwise, AddAxpyScaleMatchDouble) {
  device::CpuDevice dev;
  Tensor a = randn(dev, {kN, kC}, 8);
  Tensor b = randn(dev, {kN, kC}, 9);
  const auto ad = to_double(a), bd = to_double(b);
  std::vector<double> sum(ad.size()), ax(ad.size()), sc(ad.size());
  for (size_t i = 0; i < ad.size(); ++i) {
    sum[i] = ad[i] + bd[i];
    ax[i] = bd[i] + 0.37 * sum[i];
    sc[i] = -1.5 * ax[i];
  }
  Tensor out = Tensor::empty({kN, kC}, DType::F32, dev, "out");
  add(a, b, out);
  EXPECT_LT(rel_error(to_double(out), sum), 1e-6);
  add(a, b, a);  // out aliasing an input
  EXPECT_LT(rel_error(to_double(a), sum), 1e-6);
  axpy(0.37f, a, b);
  EXPECT_LT(rel_error(to_double(b), ax), 1e-6);
  scale(b, -1.5f);
  EXPECT_LT(rel_error(to_double(b), sc), 1e-6);
  EXPECT_THROW(add(a, randn(dev, {kC, kN}, 10), out), Error);
}

double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// forward(x) and backward(x, dy, dx) of an activation against `ref` in double.
void check_activation(void (*forward)(const Tensor&, const Tensor&),
                      void (*backward)(const Tensor&, const Tensor&, const Tensor&), double (*ref)(double)) {
  device::CpuDevice dev;
  Tensor x = randn(dev, {3, kN, kC}, 11, 2.0f);  // (B, N, C)
  Tensor dy = randn(dev, {3, kN, kC}, 12);       // (B, N, C)
  auto f = [&](const std::vector<double>& in) {
    std::vector<double> out(in.size());
    for (size_t i = 0; i < in.size(); ++i) out[i] = ref(in[i]);
    return out;
  };
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev, "y");
  forward(x, y);
  EXPECT_LT(rel_error(to_double(y), f(to_double(x))), 1e-6);
  Tensor dx = Tensor::empty(x.shape(), DType::F32, dev, "dx");
  backward(x, dy, dx);
  EXPECT_LT(rel_error(to_double(dx), numeric_grad(f, to_double(x), to_double(dy))), 1e-5);
}

TEST(OpsRelu, ForwardAndBackward) {
  check_activation(relu_forward, relu_backward, [](double x) { return x > 0 ? x : 0.0; });
}

TEST(OpsGelu, ForwardAndBackward) { check_activation(gelu_forward, gelu_backward, gelu_ref); }

TEST(OpsCast, Bf16RoundTripWithinHalfUlp) {
  device::CpuDevice dev;
  Tensor x = randn(dev, {kN, kC}, 13, 100.0f);
  Tensor half = Tensor::empty({kN, kC}, DType::BF16, dev, "bf16");
  Tensor back = Tensor::empty({kN, kC}, DType::F32, dev, "back");
  cast(x, half);
  cast(half, back);
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_LE(std::fabs(back.f32()[i] - x.f32()[i]), std::ldexp(std::fabs(x.f32()[i]), -8)) << i;
}

TEST(OpsCast, KnownValues) {
  device::CpuDevice dev;
  Tensor x = testing::from_double(dev, {5}, {1.0, -2.5, 65504.0, 0.0, 0.0});
  x.f32()[4] = std::nanf("");
  for (DType t : {DType::BF16, DType::F16}) {
    Tensor h = Tensor::empty({5}, t, dev, "half");
    Tensor back = Tensor::empty({5}, DType::F32, dev, "back");
    cast(x, h);
    cast(h, back);
    EXPECT_EQ(back.f32()[0], 1.0f);
    EXPECT_EQ(back.f32()[1], -2.5f);
    if (t == DType::F16) {
      EXPECT_EQ(back.f32()[2], 65504.0f);  // the largest finite f16
    }
    EXPECT_EQ(back.f32()[3], 0.0f);
    EXPECT_TRUE(std::isnan(back.f32()[4])) << dtype_name(t);
  }
  Tensor copy = Tensor::empty({5}, DType::F32, dev, "copy");
  cast(x, copy);
  EXPECT_TRUE(testing::bit_equal(x, copy));
}

TEST(OpsCast, UnsupportedPairThrows) {
  device::CpuDevice dev;
  Tensor bf = Tensor::empty({4}, DType::BF16, dev, "bf16");
  Tensor f16 = Tensor::empty({4}, DType::F16, dev, "f16");
  Tensor i32 = Tensor::empty({4}, DType::I32, dev, "i32");
  EXPECT_THROW(cast(bf, f16), Error);
  EXPECT_THROW(cast(i32, bf), Error);
  EXPECT_THROW(cast(Tensor::empty({3}, DType::F32, dev, "f32"), bf), Error);
}

}  // namespace
}  // namespace tandem::ops
