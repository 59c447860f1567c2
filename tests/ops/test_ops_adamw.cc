// AdamW: several steps against a float64 reference of the formula in ops.h, with weight decay and grad_scale,
// decoupled (AdamW) and as L2 regularisation (Adam); every buffer must be f32 (16-bit parameters step through
// their f32 master copy).
#include <gtest/gtest.h>

#include <cmath>

#include "ops_test_util.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::randn;
using testing::rel_error;
using testing::to_double;

// Four steps of the op and of the float64 formula from the same start; returns the op's final weights.
std::vector<double> steps_against_reference(bool decoupled) {
  device::CpuDevice dev;
  const int64_t n = 103;
  AdamWParams hp;
  hp.lr = 3e-2f;
  hp.beta1 = 0.8f;
  hp.beta2 = 0.95f;
  hp.eps = 1e-6f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.25f;
  hp.decoupled = decoupled;
  Tensor param = randn(dev, {n}, 1);  // (n)
  Tensor m = Tensor::zeros({n}, DType::F32, dev, "m");
  Tensor v = Tensor::zeros({n}, DType::F32, dev, "v");
  std::vector<double> p = to_double(param), md(n, 0.0), vd(n, 0.0);
  const double wd = hp.weight_decay;
  for (int64_t step = 1; step <= 4; ++step) {
    Tensor grad = randn(dev, {n}, 10 + step, 2.0f);  // (n), a fresh gradient each step
    const auto g = to_double(grad);
    hp.step = step;
    adamw_step(param, grad, m, v, hp);
    const double b1 = hp.beta1, b2 = hp.beta2;
    for (int64_t i = 0; i < n; ++i) {
      // L2: the decay joins the (scaled) gradient before the moments; decoupled: it is applied to the weight.
      const double gi = g[i] * hp.grad_scale + (decoupled ? 0.0 : wd * p[i]);
      md[i] = b1 * md[i] + (1 - b1) * gi;
      vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
      const double m_hat = md[i] / (1 - std::pow(b1, step)), v_hat = vd[i] / (1 - std::pow(b2, step));
      p[i] -= double(hp.lr) * (m_hat / (std::sqrt(v_hat) + hp.eps) + (decoupled ? wd * p[i] : 0.0));
    }
    EXPECT_LT(rel_error(to_double(param), p), 1e-6) << "step " << step << (decoupled ? " (AdamW)" : " (L2)");
    EXPECT_LT(rel_error(to_double(m), md), 1e-6) << "step " << step << (decoupled ? " (AdamW)" : " (L2)");
    EXPECT_LT(rel_error(to_double(v), vd), 1e-6) << "step " << step << (decoupled ? " (AdamW)" : " (L2)");
  }
  return to_double(param);
}

TEST(OpsAdamW, StepsMatchDoubleReference) { steps_against_reference(/*decoupled=*/true); }

TEST(OpsAdamW, L2StepsMatchDoubleReference) {
  const std::vector<double> l2 = steps_against_reference(/*decoupled=*/false);
  // The two modes must differ by more than the tolerance above, or the comparison would prove nothing.
  EXPECT_GT(rel_error(l2, steps_against_reference(/*decoupled=*/true)), 1e-3);
}

TEST(OpsAdamW, MismatchedSizesAndStepZeroThrow) {
  device::CpuDevice dev;
  Tensor p = randn(dev, {5}, 1);
  Tensor m = Tensor::zeros({5}, DType::F32, dev, "m");
  Tensor v = Tensor::zeros({5}, DType::F32, dev, "v");
  EXPECT_THROW(adamw_step(p, randn(dev, {6}, 2), m, v, AdamWParams{}), Error);
  AdamWParams zero;
  zero.step = 0;
  EXPECT_THROW(adamw_step(p, randn(dev, {5}, 3), m, v, zero), Error);
}

TEST(OpsAdamW, SixteenBitBuffersThrowNamingThem) {
  device::CpuDevice dev;
  Tensor p = randn(dev, {5}, 1), g = randn(dev, {5}, 2);
  Tensor m = Tensor::zeros({5}, DType::F32, dev, "m"), v = Tensor::zeros({5}, DType::F32, dev, "v");
  adamw_step(p, g, m, v, AdamWParams{});  // the accepted combination
  const Tensor bf = testing::randn_as(dev, {5}, 3, DType::BF16), f16 = testing::randn_as(dev, {5}, 4, DType::F16);
  try {
    adamw_step(bf, g, m, v, AdamWParams{});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part : {"adamw_step", "param", "bf16", "f32"}) EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
  EXPECT_THROW(adamw_step(p, f16, m, v, AdamWParams{}), Error);
  EXPECT_THROW(adamw_step(p, g, Tensor::zeros({5}, DType::BF16, dev, "m"), v, AdamWParams{}), Error);
  EXPECT_THROW(adamw_step(p, g, m, Tensor::zeros({5}, DType::F16, dev, "v"), AdamWParams{}), Error);
}

// The rounded copy (the offloaded optimizer's values for the device): the same bits as the update followed by a cast,
// for bf16 and f16, over more elements than one thread's chunk so that every vector path and the threads' split run;
// a rounded copy of another size or of fp32 is refused.
TEST(OpsAdamW, RoundedCopyEqualsTheCastOfTheUpdate) {
  device::CpuDevice dev;
  const int64_t n = (int64_t{1} << 17) + 37;  // two chunks and a tail
  for (DType t : {DType::BF16, DType::F16}) {
    AdamWParams hp;
    hp.lr = 1e-2f;
    hp.weight_decay = 0.1f;
    hp.step = 3;
    const Tensor g = randn(dev, {n}, 2);
    Tensor p1 = randn(dev, {n}, 1), p2 = randn(dev, {n}, 1);
    Tensor m1 = randn(dev, {n}, 3), m2 = randn(dev, {n}, 3);
    Tensor v1 = Tensor::zeros({n}, DType::F32, dev, "v"), v2 = Tensor::zeros({n}, DType::F32, dev, "v");
    Tensor rounded = Tensor::zeros({n}, t, dev, "rounded"), cast_after = Tensor::zeros({n}, t, dev, "cast");
    adamw_step(p1, g, m1, v1, hp, rounded);
    adamw_step(p2, g, m2, v2, hp);
    cast(p2, cast_after);
    EXPECT_EQ(to_double(p1), to_double(p2)) << dtype_name(t);
    EXPECT_EQ(to_double(m1), to_double(m2)) << dtype_name(t);
    const auto widened = [&](const Tensor& x) {  // (n) f32: every 16-bit value is exact in fp32
      Tensor f = Tensor::empty({n}, DType::F32, dev, "widened");
      cast(x, f);
      return to_double(f);
    };
    EXPECT_EQ(widened(rounded), widened(cast_after)) << dtype_name(t);
    EXPECT_GT(rel_error(widened(rounded), to_double(randn(dev, {n}, 1))), 1e-4) << "the update moved the weights";
  }
  Tensor p = randn(dev, {5}, 1), g = randn(dev, {5}, 2);
  Tensor m = Tensor::zeros({5}, DType::F32, dev, "m"), v = Tensor::zeros({5}, DType::F32, dev, "v");
  EXPECT_THROW(adamw_step(p, g, m, v, AdamWParams{}, Tensor::zeros({6}, DType::BF16, dev, "rounded")), Error);
  EXPECT_THROW(adamw_step(p, g, m, v, AdamWParams{}, Tensor::zeros({5}, DType::F32, dev, "rounded")), Error);
}

}  // namespace
}  // namespace tandem::ops
