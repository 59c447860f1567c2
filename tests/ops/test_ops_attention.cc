// Causal attention against a float64 reference that materialises the full softmax; backward against finite
// differences; causality; scratch memory returned to the device; the 16-bit compute dtypes; refused dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

struct Dims {
  int64_t b, t, h, d;
  int64_t c() const { return h * d; }
};

// y (B, T, C) from qkv (B, T, 3C) in double; fills lse (B, H, T) when given.
std::vector<double> reference(const std::vector<double>& qkv, const Dims& s, std::vector<double>* lse = nullptr) {
  const int64_t c = s.c();
  std::vector<double> y(static_cast<size_t>(s.b * s.t * c));
  if (lse) lse->assign(static_cast<size_t>(s.b * s.h * s.t), 0.0);
  std::vector<double> scores(static_cast<size_t>(s.t * s.t));  // (T, T)
  auto at = [&](int64_t bi, int64_t ti, int64_t part, int64_t hi, int64_t j) {
    return qkv[(bi * s.t + ti) * 3 * c + part * c + hi * s.d + j];
  };
  for (int64_t bi = 0; bi < s.b; ++bi)
    for (int64_t hi = 0; hi < s.h; ++hi) {
      for (int64_t i = 0; i < s.t; ++i)
        for (int64_t j = 0; j < s.t; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < s.d; ++e) dot += at(bi, i, 0, hi, e) * at(bi, j, 1, hi, e);
          scores[i * s.t + j] = j > i ? -std::numeric_limits<double>::infinity() : dot / std::sqrt(double(s.d));
        }
      for (int64_t i = 0; i < s.t; ++i) {
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j < s.t; ++j) mx = std::max(mx, scores[i * s.t + j]);
        for (int64_t j = 0; j < s.t; ++j) sum += std::exp(scores[i * s.t + j] - mx);
        if (lse) (*lse)[(bi * s.h + hi) * s.t + i] = mx + std::log(sum);
        for (int64_t e = 0; e < s.d; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < s.t; ++j) acc += std::exp(scores[i * s.t + j] - mx) / sum * at(bi, j, 2, hi, e);
          y[(bi * s.t + i) * c + hi * s.d + e] = acc;
        }
      }
    }
  return y;
}

// dqkv (B, T, 3C) for upstream dy (B, T, C), analytically in double: P from the full softmax, dV = P^T dy,
// dP = dy V^T, dS = P (dP - rowsum(P dP)), dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D). Cheaper than finite
// differences, so it reaches sizes with several row blocks.
std::vector<double> reference_backward(const std::vector<double>& qkv, const std::vector<double>& dy, const Dims& s) {
  const int64_t c = s.c(), ld = 3 * c;
  const double scale = 1.0 / std::sqrt(double(s.d));
  std::vector<double> dqkv(qkv.size(), 0.0);
  std::vector<double> p(static_cast<size_t>(s.t * s.t)), dp(p.size());  // (T, T)
  for (int64_t bi = 0; bi < s.b; ++bi)
    for (int64_t hi = 0; hi < s.h; ++hi) {
      auto at = [&](int64_t ti, int64_t part, int64_t e) { return (bi * s.t + ti) * ld + part * c + hi * s.d + e; };
      auto g = [&](int64_t ti, int64_t e) { return dy[(bi * s.t + ti) * c + hi * s.d + e]; };
      for (int64_t i = 0; i < s.t; ++i) {
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < s.d; ++e) dot += qkv[at(i, 0, e)] * qkv[at(j, 1, e)];
          p[i * s.t + j] = dot * scale;
          mx = std::max(mx, p[i * s.t + j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(p[i * s.t + j] - mx);
        double row_dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          p[i * s.t + j] = std::exp(p[i * s.t + j] - mx) / sum;
          double d = 0;
          for (int64_t e = 0; e < s.d; ++e) d += g(i, e) * qkv[at(j, 2, e)];
          dp[i * s.t + j] = d;
          row_dot += p[i * s.t + j] * d;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[i * s.t + j] * (dp[i * s.t + j] - row_dot) * scale;
          for (int64_t e = 0; e < s.d; ++e) {
            dqkv[at(i, 0, e)] += ds * qkv[at(j, 1, e)];
            dqkv[at(j, 1, e)] += ds * qkv[at(i, 0, e)];
            dqkv[at(j, 2, e)] += p[i * s.t + j] * g(i, e);
          }
        }
      }
    }
  return dqkv;
}

struct Outputs {
  Tensor y, lse;
};

Outputs forward(Device& dev, const Tensor& qkv, const Dims& s) {
  Outputs r{Tensor::empty({s.b, s.t, s.c()}, DType::F32, dev, "y"),
            Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse")};
  attention_forward(qkv, static_cast<int>(s.h), r.y, r.lse);
  return r;
}

void PrintTo(const Dims& s, std::ostream* os) { *os << "B=" << s.b << " T=" << s.t << " H=" << s.h << " D=" << s.d; }

class OpsAttentionShapes : public ::testing::TestWithParam<Dims> {};

TEST_P(OpsAttentionShapes, ForwardMatchesDouble) {
  const Dims s = GetParam();
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, 3 * s.c()}, 1);  // (B, T, 3C)
  const Outputs r = forward(dev, qkv, s);
  std::vector<double> want_lse;
  const auto want = reference(to_double(qkv), s, &want_lse);
  EXPECT_LT(rel_error(to_double(r.y), want), 1e-5);
  EXPECT_LT(rel_error(to_double(r.lse), want_lse), 1e-6);
}

TEST_P(OpsAttentionShapes, BackwardMatchesFiniteDifferences) {
  const Dims s = GetParam();
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, 3 * s.c()}, 2);  // (B, T, 3C)
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 3);       // (B, T, C)
  const Outputs r = forward(dev, qkv, s);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");  // (B, T, 3C)
  attention_backward(qkv, static_cast<int>(s.h), r.y, r.lse, dy, dqkv);
  const auto want = numeric_grad([&](const auto& x) { return reference(x, s); }, to_double(qkv), to_double(dy));
  EXPECT_LT(rel_error(to_double(dqkv), want), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsAttentionShapes,
                         ::testing::Values(Dims{1, 9, 3, 5}, Dims{2, 9, 3, 5}, Dims{3, 1, 2, 4}, Dims{2, 7, 1, 13}),
                         [](const ::testing::TestParamInfo<Dims>& p) {
                           const Dims& s = p.param;
                           return "B" + std::to_string(s.b) + "_T" + std::to_string(s.t) + "_H" + std::to_string(s.h) +
                                  "_D" + std::to_string(s.d);
                         });

// Longer rows and a wider head than the finite-difference cases can afford, and more rows than one block of the
// op's row-blocked products (T*T*D > 2^18), so blocks of unequal width meet.
TEST(OpsAttention, ForwardMatchesDoubleAtLargerSize) {
  const Dims s{2, 130, 2, 32};
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, 3 * s.c()}, 10);  // (B, T, 3C)
  const Outputs r = forward(dev, qkv, s);
  std::vector<double> want_lse;
  const auto want = reference(to_double(qkv), s, &want_lse);
  EXPECT_LT(rel_error(to_double(r.y), want), 1e-5);
  EXPECT_LT(rel_error(to_double(r.lse), want_lse), 1e-6);
}

TEST(OpsAttention, FutureTokensDoNotChangeEarlierOutputs) {
  const Dims s{2, 9, 3, 5};
  const int64_t c = s.c(), changed = 6;
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, 3 * c}, 4);  // (B, T, 3C)
  const Outputs before = forward(dev, qkv, s);
  // Replace token 6's k and v in batch row 0, in every head.
  float* row = qkv.f32() + changed * 3 * c;  // (3C) of (b=0, t=6)
  for (int64_t j = c; j < 3 * c; ++j) row[j] = 10.0f * row[j] + 1.0f;
  const Outputs after = forward(dev, qkv, s);
  for (int64_t ti = 0; ti < s.t; ++ti) {
    bool same = true;
    for (int64_t j = 0; j < c; ++j) same &= before.y.f32()[ti * c + j] == after.y.f32()[ti * c + j];
    EXPECT_EQ(same, ti < changed) << "token " << ti;
  }
  // Batch row 1 is untouched altogether.
  for (int64_t i = s.t * c; i < 2 * s.t * c; ++i) EXPECT_EQ(before.y.f32()[i], after.y.f32()[i]);
}

TEST(OpsAttention, ScratchIsReturnedToTheDevice) {
  const Dims s{2, 9, 3, 5};
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, 3 * s.c()}, 5);
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 6);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");
  const Outputs r = forward(dev, qkv, s);
  const uint64_t live = dev.live_bytes();
  dev.reset_peak();
  attention_forward(qkv, static_cast<int>(s.h), r.y, r.lse);
  attention_backward(qkv, static_cast<int>(s.h), r.y, r.lse, dy, dqkv);
  EXPECT_EQ(dev.live_bytes(), live);
  // The scratch went through the device: at least one head's (T, T) scores were accounted.
  EXPECT_GE(dev.peak_bytes(), live + static_cast<uint64_t>(s.t * s.t) * sizeof(float));
}

TEST(OpsAttention, BitIdenticalAcrossThreadCounts) {
  const Dims s{2, 130, 3, 32};
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  Tensor qkv = randn(dev, {s.b, s.t, 3 * s.c()}, 7);
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 8);
  Tensor dqkv[2];
  Outputs r[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    r[run] = forward(dev, qkv, s);
    dqkv[run] = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");
    attention_backward(qkv, static_cast<int>(s.h), r[run].y, r[run].lse, dy, dqkv[run]);
  }
  EXPECT_TRUE(testing::bit_equal(r[0].y, r[1].y));
  EXPECT_TRUE(testing::bit_equal(r[0].lse, r[1].lse));
  EXPECT_TRUE(testing::bit_equal(dqkv[0], dqkv[1]));
}

TEST(OpsAttention, HeadsMustDivideChannels) {
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {1, 4, 3 * 10}, 9);  // C = 10
  Tensor y = Tensor::empty({1, 4, 10}, DType::F32, dev, "y");
  Tensor lse = Tensor::empty({1, 3, 4}, DType::F32, dev, "lse");
  EXPECT_THROW(attention_forward(qkv, 3, y, lse), Error);
}

Outputs forward_as(Device& dev, const Tensor& qkv, const Dims& s) {
  Outputs r{Tensor::empty({s.b, s.t, s.c()}, qkv.dtype(), dev, "y"),
            Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse")};
  attention_forward(qkv, static_cast<int>(s.h), r.y, r.lse);
  return r;
}

class OpsAttentionDtypes : public ::testing::TestWithParam<DType> {};

// qkv, y, dy and dqkv in the compute dtype, lse f32 (formed from exact inputs in fp32: the fp32 bound).
TEST_P(OpsAttentionDtypes, ForwardAndBackwardMatchDoubleOnRoundedInputs) {
  const DType dt = GetParam();
  for (const Dims& s : {Dims{2, 9, 3, 5}, Dims{3, 4, 2, 6}}) {
    device::CpuDevice dev;
    Tensor qkv = randn_as(dev, {s.b, s.t, 3 * s.c()}, 31, dt);  // (B, T, 3C)
    Tensor dy = randn_as(dev, {s.b, s.t, s.c()}, 32, dt);       // (B, T, C)
    const Outputs r = forward_as(dev, qkv, s);
    std::vector<double> want_lse;
    EXPECT_LT(rel_error(values(r.y), reference(values(qkv), s, &want_lse)), tolerance(dt, 1e-5)) << s.t;
    EXPECT_LT(rel_error(values(r.lse), want_lse), 1e-6) << s.t;

    Tensor dqkv = Tensor::empty(qkv.shape(), dt, dev, "dqkv");  // (B, T, 3C)
    attention_backward(qkv, static_cast<int>(s.h), r.y, r.lse, dy, dqkv);
    const auto want = numeric_grad([&](const auto& x) { return reference(x, s); }, values(qkv), values(dy));
    EXPECT_LT(rel_error(values(dqkv), want), tolerance(dt, 1e-4)) << s.t;
  }
}

// Several row blocks per head (T = 130 rows in blocks of at most 2^18 / (T D) = 63), against the analytic gradient,
// which first must agree with finite differences at a small size.
TEST_P(OpsAttentionDtypes, BackwardAcrossRowBlocksMatchesAnalyticGradient) {
  const DType dt = GetParam();
  {
    const Dims small{2, 9, 3, 5};
    device::CpuDevice dev;
    const auto qkv = to_double(randn(dev, {small.b, small.t, 3 * small.c()}, 40));
    const auto dy = to_double(randn(dev, {small.b, small.t, small.c()}, 41));
    const auto fd = numeric_grad([&](const auto& x) { return reference(x, small); }, qkv, dy);
    ASSERT_LT(rel_error(reference_backward(qkv, dy, small), fd), 1e-8);
  }
  const Dims s{2, 130, 2, 32};
  device::CpuDevice dev;
  Tensor qkv = randn_as(dev, {s.b, s.t, 3 * s.c()}, 42, dt);  // (B, T, 3C)
  Tensor dy = randn_as(dev, {s.b, s.t, s.c()}, 43, dt);       // (B, T, C)
  const Outputs r = forward_as(dev, qkv, s);
  Tensor dqkv = Tensor::empty(qkv.shape(), dt, dev, "dqkv");
  attention_backward(qkv, static_cast<int>(s.h), r.y, r.lse, dy, dqkv);
  EXPECT_LT(rel_error(values(dqkv), reference_backward(values(qkv), values(dy), s)), tolerance(dt, 1e-5));
}

TEST_P(OpsAttentionDtypes, BitIdenticalAcrossThreadCounts) {
  const Dims s{2, 130, 3, 32};
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  Tensor qkv = randn_as(dev, {s.b, s.t, 3 * s.c()}, 7, GetParam());
  Tensor dy = randn_as(dev, {s.b, s.t, s.c()}, 8, GetParam());
  Tensor dqkv[2];
  Outputs r[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    r[run] = forward_as(dev, qkv, s);
    dqkv[run] = Tensor::empty(qkv.shape(), GetParam(), dev, "dqkv");
    attention_backward(qkv, static_cast<int>(s.h), r[run].y, r[run].lse, dy, dqkv[run]);
  }
  EXPECT_TRUE(testing::bit_equal(r[0].y, r[1].y));
  EXPECT_TRUE(testing::bit_equal(r[0].lse, r[1].lse));
  EXPECT_TRUE(testing::bit_equal(dqkv[0], dqkv[1]));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsAttentionDtypes, ::testing::ValuesIn(testing::compute_dtypes()),
                         testing::dtype_label);

TEST(OpsAttention, RefusedDtypesThrow) {
  device::CpuDevice dev;
  const DType bf = DType::BF16;
  Tensor qkv = randn_as(dev, {1, 4, 3 * 6}, 9, bf);  // C = 6, 2 heads
  Tensor y = Tensor::empty({1, 4, 6}, bf, dev, "y");
  Tensor lse = Tensor::empty({1, 2, 4}, DType::F32, dev, "lse");
  attention_forward(qkv, 2, y, lse);  // the accepted combination
  EXPECT_THROW(attention_forward(qkv, 2, Tensor::empty({1, 4, 6}, DType::F16, dev, "y"), lse), Error);
  EXPECT_THROW(attention_forward(qkv, 2, y, Tensor::empty({1, 2, 4}, bf, dev, "lse")), Error);
  Tensor dqkv = Tensor::empty(qkv.shape(), bf, dev, "dqkv");
  EXPECT_THROW(attention_backward(qkv, 2, y, lse, randn(dev, {1, 4, 6}, 10), dqkv), Error);
  try {
    attention_backward(qkv, 2, y, lse, y, Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv"));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part : {"attention_backward", "dqkv", "f32", "bf16"})
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tandem::ops
