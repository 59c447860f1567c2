// Causal grouped-query attention against a float64 reference that materialises the full softmax; backward against
// finite differences and an analytic float64 gradient; Hkv = H against attention_forward/backward, and any Hkv
// against multi-head attention on repeated kv heads (transformers' repeat_kv); causality; determinism across thread
// counts; scratch through the device and as the counting backend plans it; the 16-bit compute dtypes; refused shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops_test_util.h"
#include "tandem/device/counting_device.h"
#include "tandem/ops/backend.h"
#include "tandem/ops/cpu/cpu_ops.h"
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
  int64_t b, t, h, kv, d;
  int64_t rep() const { return h / kv; }
  int64_t width() const { return (h + 2 * kv) * d; }  // W
  int64_t c() const { return h * d; }                 // y's last dim
  // Column of element e of query head hi, of kv head g's k, of its v, in a row of qkv.
  int64_t q_at(int64_t hi, int64_t e) const { return hi * d + e; }
  int64_t k_at(int64_t g, int64_t e) const { return (h + g) * d + e; }
  int64_t v_at(int64_t g, int64_t e) const { return (h + kv + g) * d + e; }
};

void PrintTo(const Dims& s, std::ostream* os) {
  *os << "B=" << s.b << " T=" << s.t << " H=" << s.h << " Hkv=" << s.kv << " D=" << s.d;
}

// y (B, T, H*D) from qkv (B, T, W) in double; query head h reads kv head h / (H / Hkv). Fills lse (B, H, T). With
// `docs` (B, T), position i attends only to the positions j <= i of its own document.
std::vector<double> reference(const std::vector<double>& qkv, const Dims& s, std::vector<double>* lse = nullptr,
                              const std::vector<int32_t>* docs = nullptr) {
  std::vector<double> y(static_cast<size_t>(s.b * s.t * s.c()));
  if (lse) lse->assign(static_cast<size_t>(s.b * s.h * s.t), 0.0);
  std::vector<double> scores(static_cast<size_t>(s.t));
  for (int64_t bi = 0; bi < s.b; ++bi)
    for (int64_t hi = 0; hi < s.h; ++hi) {
      const int64_t g = hi / s.rep();
      auto row = [&](int64_t ti) { return (bi * s.t + ti) * s.width(); };
      for (int64_t i = 0; i < s.t; ++i) {
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j < s.t; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < s.d; ++e) dot += qkv[row(i) + s.q_at(hi, e)] * qkv[row(j) + s.k_at(g, e)];
          const bool other = docs && (*docs)[bi * s.t + j] != (*docs)[bi * s.t + i];
          scores[j] = j > i || other ? -std::numeric_limits<double>::infinity() : dot / std::sqrt(double(s.d));
          mx = std::max(mx, scores[j]);
        }
        for (int64_t j = 0; j < s.t; ++j) sum += std::exp(scores[j] - mx);
        if (lse) (*lse)[(bi * s.h + hi) * s.t + i] = mx + std::log(sum);
        for (int64_t e = 0; e < s.d; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < s.t; ++j) acc += std::exp(scores[j] - mx) / sum * qkv[row(j) + s.v_at(g, e)];
          y[(bi * s.t + i) * s.c() + hi * s.d + e] = acc;
        }
      }
    }
  return y;
}

// dqkv (B, T, W) for upstream dy (B, T, H*D), analytically in double (as test_ops_attention.cc's, per query head,
// its dk and dv added into its kv head's columns).
std::vector<double> reference_backward(const std::vector<double>& qkv, const std::vector<double>& dy, const Dims& s) {
  const double scale = 1.0 / std::sqrt(double(s.d));
  std::vector<double> dqkv(qkv.size(), 0.0);
  std::vector<double> p(static_cast<size_t>(s.t)), dp(p.size());
  for (int64_t bi = 0; bi < s.b; ++bi)
    for (int64_t hi = 0; hi < s.h; ++hi) {
      const int64_t g = hi / s.rep();
      auto row = [&](int64_t ti) { return (bi * s.t + ti) * s.width(); };
      auto grad_y = [&](int64_t ti, int64_t e) { return dy[(bi * s.t + ti) * s.c() + hi * s.d + e]; };
      for (int64_t i = 0; i < s.t; ++i) {
        double mx = -std::numeric_limits<double>::infinity(), sum = 0, row_dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < s.d; ++e) dot += qkv[row(i) + s.q_at(hi, e)] * qkv[row(j) + s.k_at(g, e)];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(p[j] - mx);
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - mx) / sum;
          double dd = 0;
          for (int64_t e = 0; e < s.d; ++e) dd += grad_y(i, e) * qkv[row(j) + s.v_at(g, e)];
          dp[j] = dd;
          row_dot += p[j] * dd;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - row_dot) * scale;
          for (int64_t e = 0; e < s.d; ++e) {
            dqkv[row(i) + s.q_at(hi, e)] += ds * qkv[row(j) + s.k_at(g, e)];
            dqkv[row(j) + s.k_at(g, e)] += ds * qkv[row(i) + s.q_at(hi, e)];
            dqkv[row(j) + s.v_at(g, e)] += p[j] * grad_y(i, e);
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
  Outputs r{Tensor::empty({s.b, s.t, s.c()}, qkv.dtype(), dev, "y"),
            Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse")};
  attention_gqa_forward(qkv, static_cast<int>(s.h), static_cast<int>(s.kv), r.y, r.lse);
  return r;
}

Tensor backward(Device& dev, const Tensor& qkv, const Dims& s, const Outputs& r, const Tensor& dy) {
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), dev, "dqkv");
  attention_gqa_backward(qkv, static_cast<int>(s.h), static_cast<int>(s.kv), r.y, r.lse, dy, dqkv);
  return dqkv;
}

class OpsAttentionGqaShapes : public ::testing::TestWithParam<Dims> {};

TEST_P(OpsAttentionGqaShapes, ForwardMatchesDouble) {
  const Dims s = GetParam();
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 1);
  const Outputs r = forward(dev, qkv, s);
  std::vector<double> want_lse;
  const auto want = reference(to_double(qkv), s, &want_lse);
  EXPECT_LT(rel_error(to_double(r.y), want), 1e-5);
  EXPECT_LT(rel_error(to_double(r.lse), want_lse), 1e-6);
}

TEST_P(OpsAttentionGqaShapes, BackwardMatchesFiniteDifferences) {
  const Dims s = GetParam();
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 2);
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 3);
  const Outputs r = forward(dev, qkv, s);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");
  std::fill(dqkv.f32(), dqkv.f32() + dqkv.numel(), NAN);  // every element must be written
  attention_gqa_backward(qkv, static_cast<int>(s.h), static_cast<int>(s.kv), r.y, r.lse, dy, dqkv);
  const auto want = numeric_grad([&](const auto& x) { return reference(x, s); }, to_double(qkv), to_double(dy));
  EXPECT_LT(rel_error(to_double(dqkv), want), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsAttentionGqaShapes,
                         ::testing::Values(Dims{1, 9, 4, 2, 5},   // 2 query heads per kv head
                                           Dims{2, 7, 6, 2, 4},   // 3 per kv head
                                           Dims{2, 6, 4, 1, 6},   // multi-query
                                           Dims{1, 6, 3, 3, 5},   // multi-head
                                           Dims{3, 1, 2, 1, 4}),  // one position
                         [](const ::testing::TestParamInfo<Dims>& p) {
                           const Dims& s = p.param;
                           return "B" + std::to_string(s.b) + "_T" + std::to_string(s.t) + "_H" + std::to_string(s.h) +
                                  "_Hkv" + std::to_string(s.kv) + "_D" + std::to_string(s.d);
                         });

// Hkv = H is attention_forward's layout and computation: the same bits.
TEST(OpsAttentionGqa, EqualHeadsAreMultiHeadAttention) {
  const Dims s{2, 130, 3, 3, 16};
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 4);  // (B, T, 3C)
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 5);
  const Outputs g = forward(dev, qkv, s);
  Outputs m{Tensor::empty(g.y.shape(), DType::F32, dev, "y"), Tensor::empty(g.lse.shape(), DType::F32, dev, "lse")};
  attention_forward(qkv, static_cast<int>(s.h), m.y, m.lse);
  EXPECT_TRUE(testing::bit_equal(g.y, m.y));
  EXPECT_TRUE(testing::bit_equal(g.lse, m.lse));
  Tensor dqkv = backward(dev, qkv, s, g, dy);
  Tensor dqkv_mha = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");
  attention_backward(qkv, static_cast<int>(s.h), m.y, m.lse, dy, dqkv_mha);
  EXPECT_TRUE(testing::bit_equal(dqkv, dqkv_mha));
}

// transformers' repeat_kv: GQA is multi-head attention whose kv heads are repeated H / Hkv times (kv head g as heads
// g*rep .. g*rep + rep - 1). The outputs agree, and each kv head's dk, dv is the sum of its copies' gradients.
TEST(OpsAttentionGqa, MatchesMultiHeadAttentionOnRepeatedKvHeads) {
  const Dims s{2, 70, 6, 2, 8};
  const int64_t c = s.c(), rep = s.rep();
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 6);
  Tensor dy = randn(dev, {s.b, s.t, c}, 7);
  Tensor mha = Tensor::empty({s.b, s.t, 3 * c}, DType::F32, dev, "qkv repeated");  // (B, T, 3C)
  for (int64_t r = 0; r < s.b * s.t; ++r) {
    const float* src = qkv.f32() + r * s.width();
    float* dst = mha.f32() + r * 3 * c;
    for (int64_t hi = 0; hi < s.h; ++hi)
      for (int64_t e = 0; e < s.d; ++e) {
        dst[hi * s.d + e] = src[s.q_at(hi, e)];
        dst[c + hi * s.d + e] = src[s.k_at(hi / rep, e)];
        dst[2 * c + hi * s.d + e] = src[s.v_at(hi / rep, e)];
      }
  }
  const Outputs g = forward(dev, qkv, s);
  Outputs m{Tensor::empty(g.y.shape(), DType::F32, dev, "y"), Tensor::empty(g.lse.shape(), DType::F32, dev, "lse")};
  attention_forward(mha, static_cast<int>(s.h), m.y, m.lse);
  EXPECT_LT(rel_error(to_double(g.y), to_double(m.y)), 1e-6);
  EXPECT_LT(rel_error(to_double(g.lse), to_double(m.lse)), 1e-6);

  Tensor dqkv = backward(dev, qkv, s, g, dy);
  Tensor dmha = Tensor::empty(mha.shape(), DType::F32, dev, "dqkv repeated");
  attention_backward(mha, static_cast<int>(s.h), m.y, m.lse, dy, dmha);
  std::vector<double> want(static_cast<size_t>(dqkv.numel()), 0.0);
  for (int64_t r = 0; r < s.b * s.t; ++r) {
    const float* src = dmha.f32() + r * 3 * c;
    double* dst = want.data() + r * s.width();
    for (int64_t hi = 0; hi < s.h; ++hi)
      for (int64_t e = 0; e < s.d; ++e) {
        dst[s.q_at(hi, e)] = src[hi * s.d + e];
        dst[s.k_at(hi / rep, e)] += src[c + hi * s.d + e];
        dst[s.v_at(hi / rep, e)] += src[2 * c + hi * s.d + e];
      }
  }
  EXPECT_LT(rel_error(to_double(dqkv), want), 1e-6);
}

// Several row blocks per head (T*T*D > 2^18), against the analytic gradient, which first must agree with finite
// differences at a small size.
TEST(OpsAttentionGqa, BackwardAcrossRowBlocksMatchesAnalyticGradient) {
  {
    const Dims small{2, 7, 6, 2, 4};
    device::CpuDevice dev;
    const auto qkv = to_double(randn(dev, {small.b, small.t, small.width()}, 8));
    const auto dy = to_double(randn(dev, {small.b, small.t, small.c()}, 9));
    const auto fd = numeric_grad([&](const auto& x) { return reference(x, small); }, qkv, dy);
    ASSERT_LT(rel_error(reference_backward(qkv, dy, small), fd), 1e-8);
  }
  const Dims s{2, 130, 4, 2, 32};
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 10);
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 11);
  const Outputs r = forward(dev, qkv, s);
  std::vector<double> want_lse;
  EXPECT_LT(rel_error(to_double(r.y), reference(to_double(qkv), s, &want_lse)), 1e-5);
  EXPECT_LT(rel_error(to_double(r.lse), want_lse), 1e-6);
  EXPECT_LT(rel_error(to_double(backward(dev, qkv, s, r, dy)), reference_backward(to_double(qkv), to_double(dy), s)),
            1e-5);
}

TEST(OpsAttentionGqa, FutureTokensDoNotChangeEarlierOutputs) {
  const Dims s{2, 9, 4, 2, 5};
  const int64_t changed = 6;
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 12);
  const Outputs before = forward(dev, qkv, s);
  float* row = qkv.f32() + changed * s.width();  // (W) of (b=0, t=6): its k and v in every kv head
  for (int64_t j = s.h * s.d; j < s.width(); ++j) row[j] = 10.0f * row[j] + 1.0f;
  const Outputs after = forward(dev, qkv, s);
  for (int64_t ti = 0; ti < s.t; ++ti) {
    bool same = true;
    for (int64_t j = 0; j < s.c(); ++j) same &= before.y.f32()[ti * s.c() + j] == after.y.f32()[ti * s.c() + j];
    EXPECT_EQ(same, ti < changed) << "token " << ti;
  }
  for (int64_t i = s.t * s.c(); i < 2 * s.t * s.c(); ++i) EXPECT_EQ(before.y.f32()[i], after.y.f32()[i]);
}

TEST(OpsAttentionGqa, BitIdenticalAcrossThreadCounts) {
  const Dims s{2, 130, 8, 2, 32};
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 13);
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 14);
  Tensor dqkv[2];
  Outputs r[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    r[run] = forward(dev, qkv, s);
    dqkv[run] = backward(dev, qkv, s, r[run], dy);
  }
  EXPECT_TRUE(testing::bit_equal(r[0].y, r[1].y));
  EXPECT_TRUE(testing::bit_equal(r[0].lse, r[1].lse));
  EXPECT_TRUE(testing::bit_equal(dqkv[0], dqkv[1]));
}

// The scratch goes through the device and is returned; its peak is what the CPU backend's scratch entry says, which is
// what the counting device allocates for the planner.
TEST(OpsAttentionGqa, ScratchIsReturnedAndMatchesItsScratchEntry) {
  const Dims s{2, 40, 4, 2, 16};
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 15);
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 16);
  Outputs r = forward(dev, qkv, s);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");
  const ScratchContext ctx{omp_get_max_threads()};
  const int heads = static_cast<int>(s.h), kv = static_cast<int>(s.kv);
  const uint64_t live = dev.live_bytes();
  dev.reset_peak();
  attention_gqa_forward(qkv, heads, kv, r.y, r.lse);
  EXPECT_EQ(dev.live_bytes(), live);
  EXPECT_EQ(dev.peak_bytes() - live,
            static_cast<uint64_t>(cpu::attention_gqa_forward_scratch(ctx, qkv, heads, kv, r.y, r.lse, 0)));
  dev.reset_peak();
  attention_gqa_backward(qkv, heads, kv, r.y, r.lse, dy, dqkv);
  EXPECT_EQ(dev.live_bytes(), live);
  EXPECT_EQ(dev.peak_bytes() - live,
            static_cast<uint64_t>(cpu::attention_gqa_backward_scratch(ctx, qkv, heads, kv, r.y, r.lse, dy, dqkv, 0)));
  // The per-head (T, T) scores at least.
  EXPECT_GE(dev.peak_bytes(), live + static_cast<uint64_t>(s.t * s.t) * sizeof(float));
}

// The counting backend records 2 B T^2 H D attention FLOPs forward and 2.5 times that backward, whatever Hkv, and
// for the GPU's time model the same weighted 128 / D for the head dim D 16.
TEST(OpsAttentionGqa, CountingBackendRecordsAttentionFlops) {
  const Dims s{2, 64, 8, 2, 16};
  device::CountingDevice dev(DeviceKind::Cuda);
  Tensor qkv = Tensor::empty({s.b, s.t, s.width()}, DType::BF16, dev, "qkv");
  Tensor y = Tensor::empty({s.b, s.t, s.c()}, DType::BF16, dev, "y");
  Tensor lse = Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse");
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::BF16, dev, "dqkv");
  const double forward_flops = 2.0 * s.b * s.t * s.t * s.h * s.d;
  attention_gqa_forward(qkv, static_cast<int>(s.h), static_cast<int>(s.kv), y, lse);
  EXPECT_DOUBLE_EQ(dev.work().attention_flops, forward_flops);
  EXPECT_DOUBLE_EQ(dev.work().attention_backward_flops, 0.0);
  attention_gqa_backward(qkv, static_cast<int>(s.h), static_cast<int>(s.kv), y, lse, y, dqkv);
  EXPECT_DOUBLE_EQ(dev.work().attention_flops, 3.5 * forward_flops);
  EXPECT_DOUBLE_EQ(dev.work().attention_backward_flops, 2.5 * forward_flops);
  EXPECT_DOUBLE_EQ(dev.work().attention_weighted_flops, 8 * 3.5 * forward_flops);
  EXPECT_DOUBLE_EQ(dev.work().attention_weighted_backward_flops, 8 * 2.5 * forward_flops);
  EXPECT_DOUBLE_EQ(dev.work().ops, 2.0);
}

class OpsAttentionGqaDtypes : public ::testing::TestWithParam<DType> {};

// qkv, y, dy and dqkv in the compute dtype, lse f32 (formed from exact inputs in fp32: the fp32 bound).
TEST_P(OpsAttentionGqaDtypes, ForwardAndBackwardMatchDoubleOnRoundedInputs) {
  const DType dt = GetParam();
  for (const Dims& s : {Dims{2, 9, 4, 2, 5}, Dims{1, 5, 3, 1, 8}}) {
    device::CpuDevice dev;
    Tensor qkv = randn_as(dev, {s.b, s.t, s.width()}, 31, dt);
    Tensor dy = randn_as(dev, {s.b, s.t, s.c()}, 32, dt);
    const Outputs r = forward(dev, qkv, s);
    std::vector<double> want_lse;
    EXPECT_LT(rel_error(values(r.y), reference(values(qkv), s, &want_lse)), tolerance(dt, 1e-5)) << s.kv;
    EXPECT_LT(rel_error(values(r.lse), want_lse), 1e-6) << s.kv;
    const auto want = numeric_grad([&](const auto& x) { return reference(x, s); }, values(qkv), values(dy));
    EXPECT_LT(rel_error(values(backward(dev, qkv, s, r, dy)), want), tolerance(dt, 1e-4)) << s.kv;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsAttentionGqaDtypes, ::testing::ValuesIn(testing::compute_dtypes()),
                         testing::dtype_label);

TEST(OpsAttentionGqa, RefusedShapesThrow) {
  device::CpuDevice dev;
  const Dims s{1, 4, 4, 2, 3};  // W = 24
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 17);
  Tensor y = Tensor::empty({s.b, s.t, s.c()}, DType::F32, dev, "y");
  Tensor lse = Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse");
  attention_gqa_forward(qkv, 4, 2, y, lse);                       // the accepted combination
  EXPECT_THROW(attention_gqa_forward(qkv, 3, 2, y, lse), Error);  // 3 heads over 2 kv heads
  EXPECT_THROW(attention_gqa_forward(qkv, 4, 0, y, lse), Error);
  EXPECT_THROW(attention_gqa_forward(qkv, 5, 1, y, lse), Error);  // W = 24 is not (5 + 2) D
  EXPECT_THROW(attention_gqa_forward(qkv, 4, 2, Tensor::empty({1, 4, 6}, DType::F32, dev, "y"), lse), Error);
  EXPECT_THROW(attention_gqa_forward(qkv, 4, 2, y, Tensor::empty({1, 2, 4}, DType::F32, dev, "lse")), Error);
  EXPECT_THROW(attention_gqa_forward(qkv, 4, 2, y, Tensor::empty({1, 4, 4}, DType::BF16, dev, "lse")), Error);
  EXPECT_THROW(attention_gqa_forward(qkv, 4, 2, qkv.flat_slice(0, 48, {1, 4, 12}), lse), Error);  // y over qkv
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");
  attention_gqa_backward(qkv, 4, 2, y, lse, y, dqkv);
  EXPECT_THROW(attention_gqa_backward(qkv, 4, 2, y, lse, y, qkv), Error);  // dqkv is qkv
  EXPECT_THROW(attention_gqa_backward(qkv, 4, 2, y, lse, randn_as(dev, y.shape(), 18, DType::BF16), dqkv), Error);
  const std::string msg = testing::error_of([&] { attention_gqa_forward(qkv, 3, 2, y, lse); });
  for (const char* part : {"attention_gqa_forward", "3 query heads", "2 key/value heads", "multiple"})
    EXPECT_HAS(msg, part);
}

// Attention kept inside documents (data.document_mask): against the float64 reference that masks other documents'
// keys, over several of the kernel's row blocks; backward against finite differences of that reference; one document
// is exactly the causal attention; ids that decrease are refused.
Tensor documents_tensor(Device& dev, const Dims& s, const std::vector<int32_t>& ids) {
  Tensor t = Tensor::empty({s.b, s.t}, DType::I32, dev, "documents");
  std::copy(ids.begin(), ids.end(), t.i32());
  return t;
}

// Positions [first, first + n) of a (1, T, W) tensor as a (1, n, W) one.
Tensor copy_rows(Device& dev, const Tensor& t, int64_t first, int64_t n) {
  const int64_t w = t.dim(2);
  Tensor out = Tensor::empty({1, n, w}, t.dtype(), dev, "rows");
  out.copy_from(t.flat_slice(first * w, n * w, {1, n, w}));
  return out;
}

// Sequence b's ids: a new document at each of `starts`.
std::vector<int32_t> packed(const Dims& s, const std::vector<std::vector<int64_t>>& starts) {
  std::vector<int32_t> ids;
  for (int64_t bi = 0; bi < s.b; ++bi) {
    int32_t doc = 0;
    for (int64_t i = 0; i < s.t; ++i) {
      for (int64_t st : starts[static_cast<size_t>(bi)]) doc += st == i;
      ids.push_back(doc);
    }
  }
  return ids;
}

TEST(OpsAttentionGqaDocuments, ForwardMatchesDoubleAcrossRowBlocks) {
  device::CpuDevice dev;
  // T 200 with D 64: the kernel works in blocks of 20 rows, so documents start inside and at the edge of blocks.
  const Dims s{2, 200, 4, 2, 64};
  const std::vector<int32_t> ids = packed(s, {{40, 57, 133}, {1, 199}});
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 41);
  Outputs r{Tensor::empty({s.b, s.t, s.c()}, DType::F32, dev, "y"),
            Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse")};
  attention_gqa_documents_forward(qkv, 4, 2, documents_tensor(dev, s, ids), r.y, r.lse);
  std::vector<double> want_lse;
  const std::vector<double> want = reference(to_double(qkv), s, &want_lse, &ids);
  EXPECT_LT(rel_error(to_double(r.y), want), 1e-5);
  EXPECT_LT(rel_error(to_double(r.lse), want_lse), 1e-6);
  // Not the causal attention across the boundaries.
  EXPECT_GT(rel_error(to_double(r.y), reference(to_double(qkv), s)), 1e-2);
}

TEST(OpsAttentionGqaDocuments, BackwardMatchesFiniteDifferences) {
  device::CpuDevice dev;
  const Dims s{2, 9, 4, 2, 4};
  const std::vector<int32_t> ids = packed(s, {{3, 5}, {8}});
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 42);
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 43);
  const Tensor docs = documents_tensor(dev, s, ids);
  Outputs r{Tensor::empty({s.b, s.t, s.c()}, DType::F32, dev, "y"),
            Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse")};
  attention_gqa_documents_forward(qkv, 4, 2, docs, r.y, r.lse);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");
  attention_gqa_documents_backward(qkv, 4, 2, docs, r.y, r.lse, dy, dqkv);
  const auto want = numeric_grad([&](const std::vector<double>& x) { return reference(x, s, nullptr, &ids); },
                                 to_double(qkv), to_double(dy));
  EXPECT_LT(rel_error(to_double(dqkv), want), 1e-4);
}

// Across several row blocks: each document's rows of y and dqkv equal the causal attention run on that document
// alone, as a sequence of its own.
TEST(OpsAttentionGqaDocuments, EachDocumentIsItsOwnSequenceForwardAndBackward) {
  device::CpuDevice dev;
  const Dims s{1, 200, 4, 2, 64};
  const std::vector<int64_t> starts = {0, 40, 57, 133, 200};
  const std::vector<int32_t> ids = packed(s, {{40, 57, 133}});
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 46);
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 47);
  const Tensor docs = documents_tensor(dev, s, ids);
  Outputs r{Tensor::empty({s.b, s.t, s.c()}, DType::F32, dev, "y"),
            Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse")};
  attention_gqa_documents_forward(qkv, 4, 2, docs, r.y, r.lse);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");
  attention_gqa_documents_backward(qkv, 4, 2, docs, r.y, r.lse, dy, dqkv);
  for (size_t k = 0; k + 1 < starts.size(); ++k) {
    const int64_t a = starts[k], n = starts[k + 1] - a;
    const Dims one{1, n, 4, 2, 64};
    const Tensor q = copy_rows(dev, qkv, a, n), g = copy_rows(dev, dy, a, n);
    const Outputs want = forward(dev, q, one);
    Tensor dq = Tensor::empty(q.shape(), DType::F32, dev, "dq");
    attention_gqa_backward(q, 4, 2, want.y, want.lse, g, dq);
    EXPECT_LT(rel_error(to_double(copy_rows(dev, r.y, a, n)), to_double(want.y)), 1e-6) << "document " << k;
    EXPECT_LT(rel_error(to_double(copy_rows(dev, dqkv, a, n)), to_double(dq)), 1e-5) << "document " << k;
  }
}

TEST(OpsAttentionGqaDocuments, OneDocumentIsTheCausalAttentionAndDecreasingIdsAreRefused) {
  device::CpuDevice dev;
  const Dims s{1, 50, 4, 2, 16};
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 44);
  Tensor dy = randn(dev, {s.b, s.t, s.c()}, 45);
  const Tensor one = documents_tensor(dev, s, std::vector<int32_t>(50, 3));
  const Outputs plain = forward(dev, qkv, s);
  Outputs r{Tensor::empty({s.b, s.t, s.c()}, DType::F32, dev, "y"),
            Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse")};
  attention_gqa_documents_forward(qkv, 4, 2, one, r.y, r.lse);
  EXPECT_TRUE(testing::bit_equal(r.y, plain.y));
  EXPECT_TRUE(testing::bit_equal(r.lse, plain.lse));
  Tensor d_plain = Tensor::empty(qkv.shape(), DType::F32, dev, "d plain"),
         d = Tensor::empty(qkv.shape(), DType::F32, dev, "d");
  attention_gqa_backward(qkv, 4, 2, plain.y, plain.lse, dy, d_plain);
  attention_gqa_documents_backward(qkv, 4, 2, one, r.y, r.lse, dy, d);
  EXPECT_TRUE(testing::bit_equal(d, d_plain));
  std::vector<int32_t> bad(50, 1);
  bad[20] = 0;
  const std::string e =
      testing::error_of([&] { attention_gqa_documents_forward(qkv, 4, 2, documents_tensor(dev, s, bad), r.y, r.lse); });
  EXPECT_HAS(e, "document id 0 at position 20 of sequence 0 follows 1");
  EXPECT_THROW(attention_gqa_documents_forward(qkv, 4, 2, Tensor::zeros({1, 49}, DType::I32, dev, "short"), r.y, r.lse),
               Error);
}

}  // namespace
}  // namespace tandem::ops
