// Bias, add, axpy, scale, ReLU and GELU against float64 references and finite differences, in f32 and in the
// 16-bit compute dtypes; casts between every pair of float dtypes; fill; determinism; refused dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "ops_test_util.h"
#include "tandem/ops/op_util.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::from_double_as;
using testing::numeric_grad;
using testing::randn;
using testing::randn_as;
using testing::rel_error;
using testing::to_double;
using testing::tolerance;
using testing::values;

constexpr int64_t kN = 7, kC = 13;

// copy_columns: columns [2, 5) of (4, 2, 7) rows into columns [1, 4) of (8, 6) rows, in bf16; the rest of dst kept.
TEST(OpsCopyColumns, CopiesTheBlockAndLeavesTheRest) {
  device::CpuDevice dev;
  const Tensor src = randn_as(dev, {4, 2, 7}, 3, DType::BF16);  // 8 rows of 7
  const Tensor dst = randn_as(dev, {8, 6}, 4, DType::BF16);
  const std::vector<float> s0 = src.to_host_floats(), d0 = dst.to_host_floats();
  copy_columns(src, 2, dst, 1, 3);
  const std::vector<float> d = dst.to_host_floats();
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < 6; ++c)
      EXPECT_EQ(d[static_cast<size_t>(r * 6 + c)],
                c >= 1 && c < 4 ? s0[static_cast<size_t>(r * 7 + c + 1)] : d0[static_cast<size_t>(r * 6 + c)])
          << "row " << r << ", column " << c;
  EXPECT_HAS(testing::error_of([&] { copy_columns(src, 5, dst, 1, 3); }), "copy_columns: columns [5, 8) of 7");
  EXPECT_HAS(testing::error_of([&] {
               copy_columns(src, 0, randn_as(dev, {7, 6}, 5, DType::BF16), 0, 1);
             }),
             "need the same rows and dtype");
}

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
  Tensor dy = randn(dev, {1401, 197}, 7);  // (N, C): large enough for the parallel path
  ASSERT_TRUE(worth_parallel(dy.numel()));
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

// The logistic sigmoid; its backward takes the forward's output, and works in place (Qwen2-MoE's shared-expert gate).
TEST(OpsSigmoid, ForwardAndBackwardFromTheOutput) {
  device::CpuDevice dev;
  for (DType dtype : {DType::F32, DType::BF16}) {
    Tensor x = randn_as(dev, {kN, kC}, 11, dtype, 3.0f);  // (N, C)
    Tensor dy = randn_as(dev, {kN, kC}, 12, dtype);       // (N, C)
    auto f = [](const std::vector<double>& in) {
      std::vector<double> out(in.size());
      for (size_t i = 0; i < in.size(); ++i) out[i] = 1.0 / (1.0 + std::exp(-in[i]));
      return out;
    };
    Tensor y = Tensor::empty(x.shape(), dtype, dev, "y");
    sigmoid_forward(x, y);
    EXPECT_LT(rel_error(values(y), f(values(x))), tolerance(dtype, 1e-6)) << dtype_name(dtype);
    Tensor dx = Tensor::empty(x.shape(), dtype, dev, "dx");
    sigmoid_backward(y, dy, dx);
    EXPECT_LT(rel_error(values(dx), numeric_grad(f, values(x), values(dy))), tolerance(dtype, 1e-5))
        << dtype_name(dtype);
    sigmoid_backward(y, dy, dy);  // in place over dy
    EXPECT_EQ(values(dy), values(dx)) << dtype_name(dtype);
  }
  EXPECT_THROW(sigmoid_forward(randn(dev, {kN, kC}, 1), randn(dev, {kC, kN}, 2)), Error);
}

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

TEST(OpsCast, IntegerOrMismatchedSizeThrows) {
  device::CpuDevice dev;
  Tensor bf = Tensor::empty({4}, DType::BF16, dev, "bf16");
  Tensor i32 = Tensor::empty({4}, DType::I32, dev, "i32");
  EXPECT_THROW(cast(i32, bf), Error);
  EXPECT_THROW(cast(bf, i32), Error);
  EXPECT_THROW(cast(i32, Tensor::empty({4}, DType::I32, dev, "i32")), Error);
  EXPECT_THROW(cast(Tensor::empty({3}, DType::F32, dev, "f32"), bf), Error);
}

// The bits the contract asks of dst for one source value: round to nearest even, overflow to inf, NaN stays NaN.
uint32_t expected_bits(float v, DType dst) {
  switch (dst) {
    case DType::BF16:
      return f32_to_bf16(v);
    case DType::F16:
      return f32_to_f16(v);
    default: {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      return u;
    }
  }
}

uint32_t bits_at(const Tensor& t, int64_t i) {
  if (t.dtype() != DType::F32) return t.u16()[i];
  uint32_t u;
  std::memcpy(&u, t.f32() + i, 4);
  return u;
}

// Every ordered pair of float dtypes, over ordinary values, values that overflow f16 and fall below its normal
// range, signed zeros, infinities and NaN: each element is rounded once from its exact source value.
TEST(OpsCast, EveryPairRoundsOnceFromTheSource) {
  device::CpuDevice dev;
  std::vector<double> src_vals = {1.0,
                                  -2.5,
                                  65504.0,
                                  65520.0,
                                  1e5,
                                  3.0e-5,
                                  6.1e-5,
                                  1e-8,
                                  1.00390625,
                                  0.0,
                                  -0.0,
                                  std::numeric_limits<double>::infinity(),
                                  -std::numeric_limits<double>::infinity(),
                                  std::nan("")};
  for (double v : to_double(randn(dev, {50}, 13, 30.0f))) src_vals.push_back(v);
  const int64_t n = static_cast<int64_t>(src_vals.size());
  for (DType from : testing::compute_dtypes())
    for (DType to : testing::compute_dtypes()) {
      Tensor src = from_double_as(dev, {n}, src_vals, from);
      Tensor dst = Tensor::empty({n}, to, dev, "dst");
      cast(src, dst);
      const std::vector<float> exact = src.to_host_floats();  // widening is exact
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(exact[i])) {
          EXPECT_TRUE(std::isnan(dst.to_host_floats()[i])) << dtype_name(from) << " -> " << dtype_name(to);
        } else {
          EXPECT_EQ(bits_at(dst, i), expected_bits(exact[i], to))
              << dtype_name(from) << " -> " << dtype_name(to) << " of " << exact[i];
        }
      }
    }
}

TEST(OpsFill, EveryDtypeGetsTheRoundedValue) {
  device::CpuDevice dev;
  for (DType t : testing::compute_dtypes())
    for (float v : {0.1f, -3.0f, 0.0f, 1e6f}) {
      Tensor x = randn_as(dev, {3, 5}, 1, t);
      fill(x, v);
      for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(bits_at(x, i), expected_bits(v, t)) << dtype_name(t) << v;
    }
  Tensor big = Tensor::empty({70000}, DType::BF16, dev, "big");  // the parallel path
  fill(big, 2.0f);
  for (float v : big.to_host_floats()) ASSERT_EQ(v, 2.0f);
  EXPECT_THROW(fill(Tensor::empty({4}, DType::I32, dev, "i32"), 1.0f), Error);
}

class OpsElementwiseDtypes : public ::testing::TestWithParam<DType> {};

TEST_P(OpsElementwiseDtypes, BiasForwardAndBackward) {
  const DType x = GetParam();
  device::CpuDevice dev;
  Tensor y = randn_as(dev, {2, 5, kC}, 1, x);  // (B, T, C)
  Tensor b = randn_as(dev, {kC}, 2, x);        // (C)
  auto want = values(y);
  const auto bd = values(b);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bd[i % kC];
  add_bias(y, b);
  EXPECT_LT(rel_error(values(y), want), tolerance(x, 1e-6));

  // dbias is f32 whatever dy holds: the sum of exact inputs in fp32 keeps fp32 accuracy.
  Tensor dy = randn_as(dev, {2, 5, kC}, 3, x);
  Tensor db = randn(dev, {kC}, 4);  // (C), nonzero: the op accumulates
  auto expect = values(db);
  const auto g = values(dy);
  for (size_t i = 0; i < g.size(); ++i) expect[i % kC] += g[i];
  bias_backward(dy, db);
  EXPECT_LT(rel_error(values(db), expect), 1e-6);
}

TEST_P(OpsElementwiseDtypes, AddAxpyScaleFromRoundedInputs) {
  const DType x = GetParam();
  device::CpuDevice dev;
  Tensor a = randn_as(dev, {kN, kC}, 8, x);
  Tensor b = randn_as(dev, {kN, kC}, 9, x);
  const auto ad = values(a), bd = values(b);
  std::vector<double> sum(ad.size()), ax(ad.size()), sc(ad.size());
  for (size_t i = 0; i < ad.size(); ++i) {
    sum[i] = ad[i] + bd[i];
    ax[i] = bd[i] + 0.37 * ad[i];
    sc[i] = -1.5 * ad[i];
  }
  Tensor out = Tensor::empty({kN, kC}, x, dev, "out");
  add(a, b, out);
  EXPECT_LT(rel_error(values(out), sum), tolerance(x, 1e-6));
  axpy(0.37f, a, b);
  EXPECT_LT(rel_error(values(b), ax), tolerance(x, 1e-6));
  scale(a, -1.5f);
  EXPECT_LT(rel_error(values(a), sc), tolerance(x, 1e-6));
}

// forward(x) and backward(x, dy, dx) of an activation in `dtype`, against `ref` in double on the rounded inputs.
void check_activation_as(DType dtype, void (*forward)(const Tensor&, const Tensor&),
                         void (*backward)(const Tensor&, const Tensor&, const Tensor&), double (*ref)(double)) {
  device::CpuDevice dev;
  Tensor x = randn_as(dev, {3, kN, kC}, 11, dtype, 2.0f);  // (B, N, C)
  Tensor dy = randn_as(dev, {3, kN, kC}, 12, dtype);       // (B, N, C)
  auto f = [&](const std::vector<double>& in) {
    std::vector<double> out(in.size());
    for (size_t i = 0; i < in.size(); ++i) out[i] = ref(in[i]);
    return out;
  };
  Tensor y = Tensor::empty(x.shape(), dtype, dev, "y");
  forward(x, y);
  EXPECT_LT(rel_error(values(y), f(values(x))), tolerance(dtype, 1e-6));
  Tensor dx = Tensor::empty(x.shape(), dtype, dev, "dx");
  backward(x, dy, dx);
  EXPECT_LT(rel_error(values(dx), numeric_grad(f, values(x), values(dy))), tolerance(dtype, 1e-5));
}

TEST_P(OpsElementwiseDtypes, ReluForwardAndBackward) {
  check_activation_as(GetParam(), relu_forward, relu_backward, [](double x) { return x > 0 ? x : 0.0; });
}

TEST_P(OpsElementwiseDtypes, GeluForwardAndBackward) {
  check_activation_as(GetParam(), gelu_forward, gelu_backward, gelu_ref);
}

TEST_P(OpsElementwiseDtypes, BiasBackwardIsBitIdenticalAcrossThreadCounts) {
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  Tensor dy = randn_as(dev, {1401, 197}, 7, GetParam());  // (N, C)
  ASSERT_TRUE(worth_parallel(dy.numel()));                // large enough for the parallel path
  Tensor db[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    db[run] = Tensor::zeros({197}, DType::F32, dev, "db");
    bias_backward(dy, db[run]);
  }
  EXPECT_TRUE(testing::bit_equal(db[0], db[1]));
}

// The biased GELU is gelu(x + bias) against float64 (forward, and backward by finite differences in x), and gives
// exactly the bits of add_bias followed by gelu_forward / gelu_backward: fusing the passes changes no result.
TEST_P(OpsElementwiseDtypes, BiasGeluMatchesDoubleAndTheTwoPasses) {
  const DType dtype = GetParam();
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  for (const Shape& shape : {Shape{3, kN, kC}, Shape{64, 1031}}) {  // small, and large enough for the parallel path
    const int64_t c = shape.back();
    Tensor x = randn_as(dev, shape, 31, dtype, 2.0f);  // (..., C)
    Tensor b = randn_as(dev, {c}, 32, dtype, 0.5f);    // (C)
    Tensor dy = randn_as(dev, shape, 33, dtype);       // (..., C)
    const int64_t rows = x.numel() / c;
    const Tensor x2 = x.view({rows, c}), dy2 = dy.view({rows, c});
    // The two passes: biased = round(x + b), then the GELU of it.
    Tensor biased = testing::copy_of(dev, x2);
    add_bias(biased, b);
    Tensor y_two = Tensor::empty({rows, c}, dtype, dev, "y (two passes)");
    gelu_forward(biased, y_two);
    Tensor dx_two = Tensor::empty({rows, c}, dtype, dev, "dx (two passes)");
    gelu_backward(biased, dy2, dx_two);
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      Tensor y = Tensor::empty({rows, c}, dtype, dev, "y");
      bias_gelu_forward(x2, b, y);
      EXPECT_TRUE(testing::bit_equal(y, y_two)) << shape_str(shape) << " threads " << threads;
      Tensor dx = Tensor::empty({rows, c}, dtype, dev, "dx");
      bias_gelu_backward(x2, b, dy2, dx);
      EXPECT_TRUE(testing::bit_equal(dx, dx_two)) << shape_str(shape) << " threads " << threads;
    }
    // Against float64 on the rounded sum (what the op sees after its one rounding).
    const auto bv = values(biased);
    std::vector<double> want(bv.size());
    for (size_t i = 0; i < bv.size(); ++i) want[i] = gelu_ref(bv[i]);
    EXPECT_LT(rel_error(values(y_two), want), tolerance(dtype, 1e-6));
    if (dtype == DType::F32 && x.numel() < 1000) {
      // d/dx of sum(dy * gelu(x + b)) by central differences in double (quadratic in the size: the small shape).
      const auto bd = values(b);
      auto f = [&](const std::vector<double>& in) {
        std::vector<double> out(in.size());
        for (size_t i = 0; i < in.size(); ++i) out[i] = gelu_ref(in[i] + bd[i % static_cast<size_t>(c)]);
        return out;
      };
      Tensor dx = Tensor::empty({rows, c}, dtype, dev, "dx");
      bias_gelu_backward(x2, b, dy2, dx);
      EXPECT_LT(rel_error(values(dx), numeric_grad(f, values(x2), values(dy2))), 1e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsElementwiseDtypes, ::testing::ValuesIn(testing::compute_dtypes()),
                         testing::dtype_label);

TEST(OpsBiasGelu, ShapesAndDtypesChecked) {
  device::CpuDevice dev;
  const Tensor x = randn(dev, {4, 3}, 1), y = randn(dev, {4, 3}, 2), b = randn(dev, {3}, 3);
  EXPECT_HAS(testing::error_of([&] { bias_gelu_forward(x, randn(dev, {4}, 4), y); }), "bias_gelu_forward: bias");
  EXPECT_HAS(testing::error_of([&] { bias_gelu_forward(x, b, randn(dev, {3, 4}, 5)); }), "differ in shape");
  EXPECT_HAS(testing::error_of([&] { bias_gelu_backward(x, randn_as(dev, {3}, 6, DType::BF16), y, y); }), "bf16");
  EXPECT_HAS(testing::error_of([&] { bias_gelu_backward(x, b, randn(dev, {4, 4}, 7), y); }), "bias_gelu_backward");
}

// Each op names itself and the dtypes in conflict; the always-f32 outputs refuse 16-bit buffers.
TEST(OpsElementwise, RefusedDtypesThrowNamingThem) {
  device::CpuDevice dev;
  const Tensor bf = randn_as(dev, {4, 3}, 1, DType::BF16), f16 = randn_as(dev, {4, 3}, 2, DType::F16);
  const Tensor f32 = randn(dev, {4, 3}, 3), i32 = Tensor::zeros({4, 3}, DType::I32, dev, "i32");
  const Tensor bf_c = randn_as(dev, {3}, 4, DType::BF16), f32_c = randn(dev, {3}, 5);
  auto expect_names = [](const std::function<void()>& call, const std::vector<std::string>& parts) {
    try {
      call();
      ADD_FAILURE() << "expected an Error naming " << parts[0];
    } catch (const Error& e) {
      for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_names([&] { add(bf, f16, bf); }, {"add", "bf16", "f16"});
  expect_names([&] { add(bf, bf, f32); }, {"add", "bf16", "f32"});
  expect_names([&] { axpy(1.0f, f32, bf); }, {"axpy", "bf16", "f32"});
  expect_names([&] { scale(i32, 2.0f); }, {"scale", "i32"});
  expect_names([&] { relu_forward(f16, bf); }, {"relu_forward", "f16", "bf16"});
  expect_names([&] { relu_backward(bf, bf, f32); }, {"relu_backward", "bf16", "f32"});
  expect_names([&] { gelu_forward(bf, f32); }, {"gelu_forward", "bf16", "f32"});
  expect_names([&] { gelu_backward(f16, bf, f16); }, {"gelu_backward", "f16", "bf16"});
  expect_names([&] { add_bias(bf, f32_c); }, {"add_bias", "bf16", "f32"});
  expect_names([&] { bias_backward(bf, bf_c); }, {"bias_backward", "dbias", "bf16", "f32"});
  expect_names([&] { bias_backward(i32, f32_c); }, {"bias_backward", "i32"});
  expect_names([&] { sum_squares(i32); }, {"sum_squares", "i32"});
}

}  // namespace
}  // namespace tandem::ops
