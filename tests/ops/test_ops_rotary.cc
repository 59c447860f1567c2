// Rotary position embedding: the forward against a float64 reference written in transformers' form
// (x * cat(c, c) + rotate_half(x) * cat(s, s)) on (B, T, H*D), (B, T, H, D) and a fused qkv whose v passes through;
// the backward as the transpose (finite differences, and the inverse of the forward); in-place use; the 16-bit
// compute dtypes; refused shapes. The host tables: inverse frequencies of the "default" and "llama3" rope types
// against numbers worked out from the formulas, and the cos/sin tables.
#include <gtest/gtest.h>

#include <cmath>

#include "ops_test_util.h"
#include "tandem/ops/ops.h"
#include "tandem/ops/rope_tables.h"

namespace tandem::ops {
namespace {

using testing::numeric_grad;
using testing::randn;
using testing::randn_as;
using testing::rel_error;
using testing::to_double;
using testing::tolerance;
using testing::values;

// One test shape: x (B, T, W) with W = heads_total * D, of which the first `rotated` heads are rotated.
struct RotaryCase {
  int64_t b, t, heads_total, rotated, d, t_max;
  int64_t width() const { return heads_total * d; }
};

void PrintTo(const RotaryCase& s, std::ostream* os) {
  *os << "B=" << s.b << " T=" << s.t << " heads=" << s.heads_total << " rotated=" << s.rotated << " D=" << s.d;
}

struct Tables {
  Tensor cos, sin;  // (T_max, D/2) f32
};

Tables make_tables(Device& dev, int64_t t_max, int64_t d, double theta = 10000.0) {
  const RopeTables r = rope_tables(rope_inverse_frequencies(d, theta), t_max);
  Tables t{Tensor::empty({t_max, d / 2}, DType::F32, dev, "cos"),
           Tensor::empty({t_max, d / 2}, DType::F32, dev, "sin")};
  copy_rope_tables(r, t.cos, t.sin);
  return t;
}

// transformers' apply_rotary_pos_emb on each head, in double: y = x * cat(c, c) + rotate_half(x) * cat(s, s) with
// rotate_half(x) = cat(-x[D/2:], x[:D/2]); heads past `rotated` are copied.
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& cos,
                              const std::vector<double>& sin, const RotaryCase& s) {
  std::vector<double> y = x;
  const int64_t half = s.d / 2;
  for (int64_t bi = 0; bi < s.b; ++bi)
    for (int64_t ti = 0; ti < s.t; ++ti)
      for (int64_t h = 0; h < s.rotated; ++h) {
        const int64_t at = (bi * s.t + ti) * s.width() + h * s.d;
        for (int64_t e = 0; e < s.d; ++e) {
          const double c = cos[ti * half + e % half], sn = sin[ti * half + e % half];
          const double rotated_half = e < half ? -x[at + e + half] : x[at + e - half];
          y[at + e] = x[at + e] * c + rotated_half * sn;
        }
      }
  return y;
}

class OpsRotaryShapes : public ::testing::TestWithParam<RotaryCase> {};

TEST_P(OpsRotaryShapes, ForwardMatchesTransformersFormInDouble) {
  const RotaryCase s = GetParam();
  device::CpuDevice dev;
  const Tables tab = make_tables(dev, s.t_max, s.d);
  Tensor x = randn(dev, {s.b, s.t, s.width()}, 1);
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev, "y");
  std::fill(y.f32(), y.f32() + y.numel(), NAN);  // every element must be written
  rotary_forward(x, tab.cos, tab.sin, static_cast<int>(s.rotated), y);
  const auto want = reference(to_double(x), to_double(tab.cos), to_double(tab.sin), s);
  EXPECT_LT(rel_error(to_double(y), want), 1e-6);
  // The heads past `rotated` (v of a fused qkv) pass through exactly.
  for (int64_t r = 0; r < s.b * s.t; ++r)
    for (int64_t j = s.rotated * s.d; j < s.width(); ++j)
      ASSERT_EQ(y.f32()[r * s.width() + j], x.f32()[r * s.width() + j]) << "row " << r << " column " << j;
}

TEST_P(OpsRotaryShapes, BackwardIsTheTransposeByFiniteDifferences) {
  const RotaryCase s = GetParam();
  device::CpuDevice dev;
  const Tables tab = make_tables(dev, s.t_max, s.d);
  Tensor x = randn(dev, {s.b, s.t, s.width()}, 2);
  Tensor dy = randn(dev, x.shape(), 3);
  Tensor dx = Tensor::empty(x.shape(), DType::F32, dev, "dx");
  rotary_backward(dy, tab.cos, tab.sin, static_cast<int>(s.rotated), dx);
  const auto c = to_double(tab.cos), sn = to_double(tab.sin);
  const auto want = numeric_grad([&](const auto& v) { return reference(v, c, sn, s); }, to_double(x), to_double(dy));
  EXPECT_LT(rel_error(to_double(dx), want), 1e-6);
}

TEST_P(OpsRotaryShapes, BackwardUndoesForward) {
  const RotaryCase s = GetParam();
  device::CpuDevice dev;
  const Tables tab = make_tables(dev, s.t_max, s.d);
  Tensor x = randn(dev, {s.b, s.t, s.width()}, 4);
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev, "y");
  Tensor back = Tensor::empty(x.shape(), DType::F32, dev, "back");
  rotary_forward(x, tab.cos, tab.sin, static_cast<int>(s.rotated), y);
  rotary_backward(y, tab.cos, tab.sin, static_cast<int>(s.rotated), back);  // R^T R = I
  EXPECT_LT(rel_error(to_double(back), to_double(x)), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsRotaryShapes,
                         ::testing::Values(RotaryCase{2, 9, 3, 3, 8, 9},    // (B, T, H*D), every head
                                           RotaryCase{1, 5, 2, 2, 2, 11},   // D = 2, tables longer than T
                                           RotaryCase{2, 7, 5, 3, 6, 7},    // fused qkv: H = 2, Hkv = 1 (q, k, v)
                                           RotaryCase{3, 4, 6, 4, 16, 40},  // fused qkv: H = 2, Hkv = 2
                                           RotaryCase{2, 3, 4, 0, 4, 3}),   // nothing rotated: a copy
                         [](const ::testing::TestParamInfo<RotaryCase>& p) {
                           const RotaryCase& s = p.param;
                           return "B" + std::to_string(s.b) + "_T" + std::to_string(s.t) + "_W" +
                                  std::to_string(s.heads_total) + "_R" + std::to_string(s.rotated) + "_D" +
                                  std::to_string(s.d);
                         });

// (B, T, H, D) is the same memory as (B, T, H*D): the same result.
TEST(OpsRotary, FourDimensionalHeadsMatchTheFlatLayout) {
  device::CpuDevice dev;
  const int64_t b = 2, t = 6, h = 3, d = 10;
  const Tables tab = make_tables(dev, t, d);
  Tensor x = randn(dev, {b, t, h, d}, 5);
  Tensor y4 = Tensor::empty(x.shape(), DType::F32, dev, "y4");
  Tensor y3 = Tensor::empty({b, t, h * d}, DType::F32, dev, "y3");
  rotary_forward(x, tab.cos, tab.sin, static_cast<int>(h), y4);
  rotary_forward(x.view({b, t, h * d}), tab.cos, tab.sin, static_cast<int>(h), y3);
  EXPECT_TRUE(testing::bit_equal(y4, y3));
}

TEST(OpsRotary, InPlaceGivesTheSameBitsAndLeavesTheRestAlone) {
  device::CpuDevice dev;
  const RotaryCase s{2, 7, 5, 3, 6, 7};
  const Tables tab = make_tables(dev, s.t_max, s.d);
  Tensor x = randn(dev, {s.b, s.t, s.width()}, 6);
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev, "y");
  rotary_forward(x, tab.cos, tab.sin, static_cast<int>(s.rotated), y);
  Tensor z = testing::copy_of(dev, x);
  rotary_forward(z, tab.cos, tab.sin, static_cast<int>(s.rotated), z);
  EXPECT_TRUE(testing::bit_equal(y, z));
  Tensor dx = Tensor::empty(x.shape(), DType::F32, dev, "dx");
  rotary_backward(x, tab.cos, tab.sin, static_cast<int>(s.rotated), dx);
  Tensor g = testing::copy_of(dev, x);
  rotary_backward(g, tab.cos, tab.sin, static_cast<int>(s.rotated), g);
  EXPECT_TRUE(testing::bit_equal(dx, g));
}

// Position 0 is the identity (cos 1, sin 0); position t rotates pair i by the angle f_i t.
TEST(OpsRotary, PositionsRotateByTheirAngles) {
  device::CpuDevice dev;
  const int64_t t = 4, d = 4;
  const Tables tab = make_tables(dev, t, d, 100.0);  // f = (1, 0.1)
  Tensor x = Tensor::zeros({1, t, d}, DType::F32, dev, "x");
  for (int64_t ti = 0; ti < t; ++ti) x.f32()[ti * d + 0] = 1.0f;  // pair 0 = (1, 0) at every position
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev, "y");
  rotary_forward(x, tab.cos, tab.sin, 1, y);
  for (int64_t ti = 0; ti < t; ++ti) {
    EXPECT_NEAR(y.f32()[ti * d + 0], std::cos(static_cast<double>(ti)), 1e-6) << ti;  // x1 cos
    EXPECT_NEAR(y.f32()[ti * d + 2], std::sin(static_cast<double>(ti)), 1e-6) << ti;  // x1 sin, D/2 further
    EXPECT_EQ(y.f32()[ti * d + 1], 0.0f);
    EXPECT_EQ(y.f32()[ti * d + 3], 0.0f);
  }
  EXPECT_EQ(y.f32()[0], 1.0f);
}

class OpsRotaryDtypes : public ::testing::TestWithParam<DType> {};

TEST_P(OpsRotaryDtypes, ForwardAndBackwardMatchDoubleOnRoundedInputs) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const RotaryCase s{2, 9, 6, 4, 8, 12};
  const Tables tab = make_tables(dev, s.t_max, s.d);
  Tensor x = randn_as(dev, {s.b, s.t, s.width()}, 7, dt);
  Tensor dy = randn_as(dev, x.shape(), 8, dt);
  Tensor y = Tensor::empty(x.shape(), dt, dev, "y");
  rotary_forward(x, tab.cos, tab.sin, static_cast<int>(s.rotated), y);
  const auto c = to_double(tab.cos), sn = to_double(tab.sin);
  EXPECT_LT(rel_error(values(y), reference(values(x), c, sn, s)), tolerance(dt, 1e-6));
  Tensor dx = Tensor::empty(x.shape(), dt, dev, "dx");
  rotary_backward(dy, tab.cos, tab.sin, static_cast<int>(s.rotated), dx);
  const auto want = numeric_grad([&](const auto& v) { return reference(v, c, sn, s); }, values(x), values(dy));
  EXPECT_LT(rel_error(values(dx), want), tolerance(dt, 1e-6));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsRotaryDtypes, ::testing::ValuesIn(testing::compute_dtypes()), testing::dtype_label);

TEST(OpsRotary, RefusedShapesThrow) {
  device::CpuDevice dev;
  const Tables tab = make_tables(dev, 5, 8);  // T_max 5, D 8
  Tensor x = randn(dev, {2, 5, 24}, 9);       // 3 heads of 8
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev, "y");
  rotary_forward(x, tab.cos, tab.sin, 3, y);                       // the accepted combination
  EXPECT_THROW(rotary_forward(x, tab.cos, tab.sin, 4, y), Error);  // 4 heads of 8 > 24
  EXPECT_THROW(rotary_forward(x, tab.cos, tab.sin, -1, y), Error);
  EXPECT_THROW(
      rotary_forward(randn(dev, {2, 6, 24}, 10), tab.cos, tab.sin, 3, Tensor::empty({2, 6, 24}, DType::F32, dev, "y")),
      Error);                                                                                    // T = 6 > T_max
  EXPECT_THROW(rotary_forward(x.view({10, 24}), tab.cos, tab.sin, 3, y.view({10, 24})), Error);  // no T dim
  EXPECT_THROW(rotary_forward(x, tab.cos, make_tables(dev, 5, 6).sin, 3, y), Error);             // sin (5, 3)
  EXPECT_THROW(rotary_forward(x, randn_as(dev, {5, 4}, 11, DType::BF16), tab.sin, 3, y), Error);
  EXPECT_THROW(rotary_forward(x, tab.cos, tab.sin, 3, Tensor::empty(x.shape(), DType::BF16, dev, "y")), Error);
  Tensor big = randn(dev, {11, 24}, 12);  // y one row past x: a partial overlap
  EXPECT_THROW(rotary_forward(big.rows(0, 10).view({2, 5, 24}), tab.cos, tab.sin, 3, big.rows(1, 10).view({2, 5, 24})),
               Error);
  const std::string msg = testing::error_of([&] {
    rotary_forward(randn(dev, {1, 9, 24}, 13), tab.cos, tab.sin, 3, Tensor::empty({1, 9, 24}, DType::F32, dev, "y"));
  });
  for (const char* part : {"rotary_forward", "9", "tables"}) EXPECT_HAS(msg, part);
}

// ---- the host tables ----

std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

TEST(RopeTables, DefaultInverseFrequenciesAreThetaPowers) {
  // 1 / 10000^(2i/8) = 1, 0.1, 0.01, 0.001.
  EXPECT_LT(rel_error(widen(rope_inverse_frequencies(8, 10000.0)), {1.0, 0.1, 0.01, 0.001}), 1e-7);
  // Llama 3's theta and head dim: 1 / 500000^(2i/128), within a few fp32 ulps of the double formula.
  const std::vector<float> f = rope_inverse_frequencies(128, 500000.0);
  ASSERT_EQ(f.size(), 64u);
  for (int64_t i = 0; i < 64; ++i)
    EXPECT_NEAR(f[i], 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / 128.0), 4e-7 * f[i]) << i;
  EXPECT_EQ(f[0], 1.0f);
}

// Worked by hand for D = 8, theta = 10^4, factor 8, low 1, high 4 and an original context of 1024: wavelengths
// 2 pi / f = 6.28, 62.8, 628 and 6283 against the bounds 1024 / 4 = 256 and 1024 / 1 = 1024. The first two are kept,
// the last is divided by 8 (0.000125), and 0.01 lies between: s = (1024 / 628.32 - 1) / 3 = 0.209919, so
// f' = (1 - s) 0.01 / 8 + s 0.01 = 0.00308676.
TEST(RopeTables, Llama3KeepsHighDividesLowAndInterpolatesBetween) {
  RopeScaling s;
  s.rope_type = "llama3";
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 1024;
  EXPECT_LT(rel_error(widen(rope_inverse_frequencies(8, 10000.0, s)), {1.0, 0.1, 0.003086760967011274, 0.000125}),
            1e-6);
}

// Llama 3.1 (theta 5e5, D 128, factor 8, low 1, high 4, 8192): frequencies 0-28 kept, 29-34 interpolated, 35-63
// divided by 8 (the bounds fall between wavelengths 2 pi 500000^(2i/128) for i = 28, 29 and 34, 35).
TEST(RopeTables, Llama31FrequencyBands) {
  RopeScaling s;
  s.rope_type = "llama3";  // the defaults are Llama 3.1's
  const std::vector<float> base = rope_inverse_frequencies(128, 500000.0);
  const std::vector<float> f = rope_inverse_frequencies(128, 500000.0, s);
  ASSERT_EQ(f.size(), 64u);
  for (int64_t i = 0; i <= 28; ++i) EXPECT_EQ(f[i], base[i]) << i;
  for (int64_t i = 35; i < 64; ++i) EXPECT_FLOAT_EQ(f[i], base[i] / 8.0f) << i;
  // i = 32: f = 500000^-0.5 = 1.41421e-3, wavelength 4442.9, s = (8192 / 4442.9 - 1) / 3 = 0.281294,
  // f' = (1 - s) f / 8 + s f = 5.24846e-4.
  EXPECT_NEAR(f[32], 5.248461609929547e-4, 1e-6 * 5.25e-4);
  for (int64_t i = 29; i <= 34; ++i) EXPECT_TRUE(f[i] < base[i] && f[i] > base[i] / 8.0f) << i;
}

TEST(RopeTables, TablesHoldCosAndSinOfPositionTimesFrequency) {
  const std::vector<float> f = rope_inverse_frequencies(6, 10000.0);
  const RopeTables t = rope_tables(f, 50);
  ASSERT_EQ(t.positions, 50);
  ASSERT_EQ(t.half, 3);
  ASSERT_EQ(t.cos.size(), 150u);
  for (int64_t pos = 0; pos < 50; ++pos)
    for (int64_t i = 0; i < 3; ++i) {
      const double angle = static_cast<double>(f[i]) * static_cast<double>(pos);
      EXPECT_NEAR(t.cos[pos * 3 + i], std::cos(angle), 1e-6) << pos << " " << i;
      EXPECT_NEAR(t.sin[pos * 3 + i], std::sin(angle), 1e-6) << pos << " " << i;
    }
  EXPECT_EQ(t.cos[0], 1.0f);
  EXPECT_EQ(t.sin[0], 0.0f);
  device::CpuDevice dev;
  Tensor c = Tensor::empty({50, 3}, DType::F32, dev, "cos"), s = Tensor::empty({50, 3}, DType::F32, dev, "sin");
  copy_rope_tables(t, c, s);
  EXPECT_EQ(c.f32()[7], t.cos[7]);
  EXPECT_EQ(s.f32()[149], t.sin[149]);
  EXPECT_THROW(copy_rope_tables(t, Tensor::empty({49, 3}, DType::F32, dev, "cos"), s), Error);
}

TEST(RopeTables, RefusedParametersSayWhatToUse) {
  EXPECT_HAS(testing::error_of([] { rope_inverse_frequencies(7, 10000.0); }), "even");
  EXPECT_HAS(testing::error_of([] { rope_inverse_frequencies(8, 0.0); }), "rope_theta");
  RopeScaling s;
  s.rope_type = "yarn";
  const std::string msg = testing::error_of([&] { rope_inverse_frequencies(8, 10000.0, s); });
  EXPECT_HAS(msg, "yarn");
  EXPECT_HAS(msg, "llama3");
  s.rope_type = "llama3";
  s.high_freq_factor = 1.0;  // not above low_freq_factor
  EXPECT_HAS(testing::error_of([&] { rope_inverse_frequencies(8, 10000.0, s); }), "high_freq_factor");
}

}  // namespace
}  // namespace tandem::ops
