// RMSNorm per head against rmsnorm_forward / rmsnorm_backward run on each group of heads gathered as rows (the same
// bits, in f32 and in the 16-bit compute dtypes), its backward against finite differences in float64, the columns
// past the normalised heads passed through, in-place use, determinism across thread counts, refused shapes.
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

constexpr float kEps = 0.05f;  // large enough that a misplaced eps shows

// A fused qkv (B, T, (H + 2 Hkv) D) and its head counts.
struct Qkv {
  int64_t b, t, d;
  int heads, kv_heads;
  int parts() const { return heads + 2 * kv_heads; }
  int64_t rows() const { return b * t; }
  Shape shape() const { return {b, t, parts() * d}; }
};

// Heads [h0, h0 + count) of every row of `x` (N, P D), gathered as rows (N count, D): row i count + h is head h0 + h
// of row i.
Tensor gather_heads(Device& dev, const Tensor& x, const Qkv& s, int h0, int count) {
  const Tensor heads = x.view({s.rows() * s.parts(), s.d});  // (N P, D)
  Tensor out = Tensor::empty({s.rows() * count, s.d}, x.dtype(), dev, "gathered heads");
  for (int64_t i = 0; i < s.rows(); ++i)
    for (int h = 0; h < count; ++h) out.rows(i * count + h, 1).copy_from(heads.rows(i * s.parts() + h0 + h, 1));
  return out;
}

// y (N, P D) in double: heads [0, H) normalised with q, [H, H + Hkv) with k, the rest as x.
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& q, const std::vector<double>& k,
                              const Qkv& s) {
  std::vector<double> y = x;
  for (int64_t i = 0; i < s.rows(); ++i)
    for (int h = 0; h < s.heads + s.kv_heads; ++h) {
      const int64_t at = (i * s.parts() + h) * s.d;
      const std::vector<double>& g = h < s.heads ? q : k;
      double sq = 0;
      for (int64_t j = 0; j < s.d; ++j) sq += x[at + j] * x[at + j];
      const double r = 1.0 / std::sqrt(sq / static_cast<double>(s.d) + static_cast<double>(kEps));
      for (int64_t j = 0; j < s.d; ++j) y[at + j] = x[at + j] * r * g[j];
    }
  return y;
}

class OpsHeadNormDtypes : public ::testing::TestWithParam<DType> {};

// Each group of heads is RMSNorm over D with its gain: the op gives rmsnorm_forward's bits on the heads gathered as
// rows, and rmsnorm_backward's dx and dgamma (a group's rows then heads are the gathered rows in order).
TEST_P(OpsHeadNormDtypes, EqualsRmsNormOfEachGroupOfHeads) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const Qkv s{2, 5, 12, 4, 2};
  Tensor x = randn_as(dev, s.shape(), 1, dt, 2.0f);  // (B, T, (H + 2 Hkv) D)
  Tensor q = randn_as(dev, {s.d}, 2, dt), k = randn_as(dev, {s.d}, 3, dt);
  Tensor dy = randn_as(dev, s.shape(), 4, dt);
  Tensor y = Tensor::empty(s.shape(), dt, dev, "y");
  Tensor rstd = Tensor::empty({s.rows(), s.heads + s.kv_heads}, DType::F32, dev, "rstd");
  head_norm_forward(x, q, k, s.heads, s.kv_heads, y, rstd, kEps);
  Tensor dx = Tensor::empty(s.shape(), dt, dev, "dx");
  Tensor dq = Tensor::zeros({s.d}, DType::F32, dev, "dq"), dk = Tensor::zeros({s.d}, DType::F32, dev, "dk");
  head_norm_backward(dy, x, q, k, s.heads, s.kv_heads, rstd, dx, dq, dk);

  const int h0[] = {0, s.heads}, count[] = {s.heads, s.kv_heads};
  const Tensor gains[] = {q, k}, dgains[] = {dq, dk};
  for (int g = 0; g < 2; ++g) {
    const Tensor xg = gather_heads(dev, x, s, h0[g], count[g]), dyg = gather_heads(dev, dy, s, h0[g], count[g]);
    Tensor yg = Tensor::empty(xg.shape(), dt, dev, "y"), rg = Tensor::empty({xg.dim(0)}, DType::F32, dev, "rstd");
    rmsnorm_forward(xg, gains[g], yg, rg, kEps);
    EXPECT_TRUE(testing::bit_equal(gather_heads(dev, y, s, h0[g], count[g]), yg)) << "group " << g;
    Tensor dxg = Tensor::empty(xg.shape(), dt, dev, "dx"), dgg = Tensor::zeros({s.d}, DType::F32, dev, "dgamma");
    rmsnorm_backward(dyg, xg, gains[g], rg, dxg, dgg);
    EXPECT_TRUE(testing::bit_equal(gather_heads(dev, dx, s, h0[g], count[g]), dxg)) << "group " << g;
    EXPECT_TRUE(testing::bit_equal(dgains[g], dgg)) << "group " << g;
  }
  // v passes through both ways.
  const int v0 = s.heads + s.kv_heads;
  EXPECT_TRUE(testing::bit_equal(gather_heads(dev, y, s, v0, s.kv_heads), gather_heads(dev, x, s, v0, s.kv_heads)));
  EXPECT_TRUE(testing::bit_equal(gather_heads(dev, dx, s, v0, s.kv_heads), gather_heads(dev, dy, s, v0, s.kv_heads)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsHeadNormDtypes, ::testing::ValuesIn(testing::compute_dtypes()),
                         testing::dtype_label);

TEST(OpsHeadNorm, ForwardMatchesDoubleAndBackwardMatchesFiniteDifferences) {
  device::CpuDevice dev;
  const Qkv s{1, 3, 6, 2, 1};
  Tensor x = randn(dev, s.shape(), 10), q = randn(dev, {s.d}, 11), k = randn(dev, {s.d}, 12);
  Tensor dy = randn(dev, s.shape(), 13);
  Tensor y = Tensor::empty(s.shape(), DType::F32, dev, "y");
  Tensor rstd = Tensor::empty({s.rows(), s.heads + s.kv_heads}, DType::F32, dev, "rstd");
  head_norm_forward(x, q, k, s.heads, s.kv_heads, y, rstd, kEps);
  const auto xd = to_double(x), qd = to_double(q), kd = to_double(k), w = to_double(dy);
  EXPECT_LT(rel_error(to_double(y), reference(xd, qd, kd, s)), 1e-6);

  Tensor dx = Tensor::empty(s.shape(), DType::F32, dev, "dx");
  Tensor dq = randn(dev, {s.d}, 14), dk = randn(dev, {s.d}, 15);  // nonzero: they accumulate
  const auto dq0 = to_double(dq), dk0 = to_double(dk);
  head_norm_backward(dy, x, q, k, s.heads, s.kv_heads, rstd, dx, dq, dk);
  const auto want_dx = numeric_grad([&](const auto& v) { return reference(v, qd, kd, s); }, xd, w);
  auto want_dq = numeric_grad([&](const auto& v) { return reference(xd, v, kd, s); }, qd, w);
  auto want_dk = numeric_grad([&](const auto& v) { return reference(xd, qd, v, s); }, kd, w);
  for (int64_t j = 0; j < s.d; ++j) {
    want_dq[j] += dq0[j];
    want_dk[j] += dk0[j];
  }
  EXPECT_LT(rel_error(to_double(dx), want_dx), 1e-4);
  EXPECT_LT(rel_error(to_double(dq), want_dq), 1e-5);
  EXPECT_LT(rel_error(to_double(dk), want_dk), 1e-5);
}

TEST(OpsHeadNorm, InPlaceGivesTheSameBits) {
  device::CpuDevice dev;
  const Qkv s{2, 3, 8, 2, 2};
  Tensor x = randn(dev, s.shape(), 20), q = randn(dev, {s.d}, 21), k = randn(dev, {s.d}, 22);
  Tensor dy = randn(dev, s.shape(), 23);
  const Shape rs{s.rows(), s.heads + s.kv_heads};
  Tensor y = Tensor::empty(s.shape(), DType::F32, dev, "y");
  Tensor rstd = Tensor::empty(rs, DType::F32, dev, "rstd"), rstd2 = Tensor::empty(rs, DType::F32, dev, "rstd");
  head_norm_forward(x, q, k, s.heads, s.kv_heads, y, rstd, kEps);
  Tensor z = testing::copy_of(dev, x);
  head_norm_forward(z, q, k, s.heads, s.kv_heads, z, rstd2, kEps);  // y is x
  EXPECT_TRUE(testing::bit_equal(y, z));
  EXPECT_TRUE(testing::bit_equal(rstd, rstd2));

  Tensor dx = Tensor::empty(s.shape(), DType::F32, dev, "dx");
  Tensor dq = Tensor::zeros({s.d}, DType::F32, dev, "dq"), dk = Tensor::zeros({s.d}, DType::F32, dev, "dk");
  Tensor dq2 = Tensor::zeros({s.d}, DType::F32, dev, "dq"), dk2 = Tensor::zeros({s.d}, DType::F32, dev, "dk");
  head_norm_backward(dy, x, q, k, s.heads, s.kv_heads, rstd, dx, dq, dk);
  Tensor g = testing::copy_of(dev, dy);
  head_norm_backward(g, x, q, k, s.heads, s.kv_heads, rstd, g, dq2, dk2);  // dx is dy
  EXPECT_TRUE(testing::bit_equal(dx, g));
  EXPECT_TRUE(testing::bit_equal(dq, dq2));
  EXPECT_TRUE(testing::bit_equal(dk, dk2));
}

TEST(OpsHeadNorm, BackwardIsBitIdenticalAcrossThreadCounts) {
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  const Qkv s{4, 256, 40, 4, 2};
  ASSERT_TRUE(worth_parallel(s.rows() * (s.heads + s.kv_heads) * s.d, kRowPassCost));  // the parallel path
  Tensor x = randn(dev, s.shape(), 30), q = randn(dev, {s.d}, 31), k = randn(dev, {s.d}, 32);
  Tensor dy = randn(dev, s.shape(), 33);
  Tensor y[2], rstd[2], dx[2], dq[2], dk[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    y[run] = Tensor::empty(s.shape(), DType::F32, dev, "y");
    rstd[run] = Tensor::empty({s.rows(), s.heads + s.kv_heads}, DType::F32, dev, "rstd");
    head_norm_forward(x, q, k, s.heads, s.kv_heads, y[run], rstd[run], kEps);
    dx[run] = Tensor::empty(s.shape(), DType::F32, dev, "dx");
    dq[run] = Tensor::zeros({s.d}, DType::F32, dev, "dq");
    dk[run] = Tensor::zeros({s.d}, DType::F32, dev, "dk");
    head_norm_backward(dy, x, q, k, s.heads, s.kv_heads, rstd[run], dx[run], dq[run], dk[run]);
  }
  for (const Tensor* t : {y, rstd, dx, dq, dk}) EXPECT_TRUE(testing::bit_equal(t[0], t[1]));
}

// Columns [c0, c0 + n) of every row of x (N, W), as a (N, n) tensor.
Tensor columns(Device& dev, const Tensor& x, int64_t c0, int64_t n) {
  const int64_t rows = rows_of(x), w = cols_of(x);
  Tensor out = Tensor::empty({rows, n}, DType::F32, dev, "columns");
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) out.f32()[i * n + j] = x.f32()[i * w + c0 + j];
  return out;
}

// Slot s of 2 of a row [q | k | v] of one head each of width 2 D: q's, k's and v's columns [s D, (s + 1) D).
Tensor slot_of(Device& dev, const Tensor& x, int64_t d, int s) {
  Tensor out = Tensor::empty({rows_of(x), 3 * d}, DType::F32, dev, "slot");
  for (int part = 0; part < 3; ++part) {
    const Tensor c = columns(dev, x, part * 2 * d + s * d, d);
    for (int64_t i = 0; i < rows_of(x); ++i)
      std::copy(c.f32() + i * d, c.f32() + (i + 1) * d, out.f32() + i * 3 * d + part * d);
  }
  return out;
}

// A q and a k each normalised whole (one head of width 2 D) give, split in two halves of D, the same values when each
// half reads the sums over both (head_norm_sums, added), forward and backward; the gains' gradients each half's own.
TEST(OpsHeadNorm, HeadsSplitOverSlotsReadTheirWholeSums) {
  device::CpuDevice dev;
  const int64_t n = 6, d = 5;
  Tensor x = randn(dev, {n, 6 * d}, 50, 2.0f), dy = randn(dev, {n, 6 * d}, 51);
  Tensor q = randn(dev, {2 * d}, 52), k = randn(dev, {2 * d}, 53);
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev, "y"), rstd = Tensor::empty({n, 2}, DType::F32, dev, "rstd");
  head_norm_forward(x, q, k, 1, 1, y, rstd, kEps);
  Tensor dx = Tensor::empty(x.shape(), DType::F32, dev, "dx");
  Tensor dq = Tensor::zeros({2 * d}, DType::F32, dev, "dq"), dk = Tensor::zeros({2 * d}, DType::F32, dev, "dk");
  head_norm_backward(dy, x, q, k, 1, 1, rstd, dx, dq, dk);

  Tensor xs[2], dys[2], qs[2], ks[2], fwd[2], bwd[2];
  for (int s = 0; s < 2; ++s) {
    xs[s] = slot_of(dev, x, d, s);
    dys[s] = slot_of(dev, dy, d, s);
    qs[s] = columns(dev, q.view({1, 2 * d}), s * d, d).view({d});
    ks[s] = columns(dev, k.view({1, 2 * d}), s * d, d).view({d});
    fwd[s] = Tensor::empty({n, 2}, DType::F32, dev, "sums");
    head_norm_sums(xs[s], xs[s], Tensor(), Tensor(), 1, 1, d, fwd[s]);
    bwd[s] = Tensor::empty({n, 2}, DType::F32, dev, "sums");
    head_norm_sums(dys[s], xs[s], qs[s], ks[s], 1, 1, d, bwd[s]);
  }
  add(fwd[0], fwd[1], fwd[0]);  // the sums over the slots
  add(bwd[0], bwd[1], bwd[0]);
  for (int s = 0; s < 2; ++s) {
    Tensor ys = Tensor::empty(xs[s].shape(), DType::F32, dev, "y"), rs = Tensor::empty({n, 2}, DType::F32, dev, "r");
    head_norm_forward(xs[s], qs[s], ks[s], 1, 1, ys, rs, kEps, fwd[0], 2 * d);
    EXPECT_LT(rel_error(to_double(ys), to_double(slot_of(dev, y, d, s))), 1e-6) << "slot " << s;
    EXPECT_LT(rel_error(to_double(rs), to_double(rstd)), 1e-6) << "slot " << s;
    Tensor dxs = Tensor::empty(xs[s].shape(), DType::F32, dev, "dx");
    Tensor dqs = Tensor::zeros({d}, DType::F32, dev, "dq"), dks = Tensor::zeros({d}, DType::F32, dev, "dk");
    head_norm_backward(dys[s], xs[s], qs[s], ks[s], 1, 1, rs, dxs, dqs, dks, bwd[0], 2 * d);
    EXPECT_LT(rel_error(to_double(dxs), to_double(slot_of(dev, dx, d, s))), 1e-5) << "slot " << s;
    EXPECT_LT(rel_error(to_double(dqs), to_double(columns(dev, dq.view({1, 2 * d}), s * d, d))), 1e-5);
    EXPECT_LT(rel_error(to_double(dks), to_double(columns(dev, dk.view({1, 2 * d}), s * d, d))), 1e-5);
  }
  // One slot's own sums alone normalise it as a head of D, not the whole: the sums are what makes it whole.
  Tensor ys = Tensor::empty(xs[0].shape(), DType::F32, dev, "y"), rs = Tensor::empty({n, 2}, DType::F32, dev, "r");
  head_norm_forward(xs[0], qs[0], ks[0], 1, 1, ys, rs, kEps);
  EXPECT_GT(rel_error(to_double(ys), to_double(slot_of(dev, y, d, 0))), 1e-2);
  EXPECT_THROW(head_norm_forward(xs[0], qs[0], ks[0], 1, 1, ys, rs, kEps, fwd[0], d - 1), Error);  // narrower than D
}

TEST(OpsHeadNorm, RefusesShapesThatDoNotFit) {
  device::CpuDevice dev;
  const Qkv s{1, 2, 8, 2, 1};  // 4 heads of 8 a row
  Tensor x = randn(dev, s.shape(), 40), q = randn(dev, {s.d}, 41), k = randn(dev, {s.d}, 42);
  Tensor y = Tensor::empty(s.shape(), DType::F32, dev, "y");
  Tensor rstd = Tensor::empty({s.rows(), 3}, DType::F32, dev, "rstd");
  EXPECT_NO_THROW(head_norm_forward(x, q, k, 2, 1, y, rstd, kEps));
  EXPECT_THROW(head_norm_forward(x, q, k, 4, 1, y, Tensor::empty({s.rows(), 5}, DType::F32, dev, "r"), kEps),
               Error);                                                                     // 5 heads of 8 > 32
  EXPECT_THROW(head_norm_forward(x, q, k, 2, 2, y, rstd, kEps), Error);                    // rstd is not (N, 4)
  EXPECT_THROW(head_norm_forward(x, q, randn(dev, {6}, 43), 2, 1, y, rstd, kEps), Error);  // k's D differs
  EXPECT_THROW(head_norm_forward(x, q, k, 2, 1, y, rstd, -1.0f), Error);                   // negative eps
  EXPECT_THROW(head_norm_forward(x, q, k, 2, 1, Tensor::empty({1, 2, 24}, DType::F32, dev, "y"), rstd, kEps),
               Error);  // y's shape differs
  Tensor dq = Tensor::zeros({s.d}, DType::F32, dev, "dq");
  EXPECT_THROW(head_norm_backward(y, x, q, k, 2, 1, rstd, y, dq, dq), Error);  // the two gradients share memory
  EXPECT_THROW(head_norm_backward(y, x, q, k, 2, 1, rstd, x, dq, Tensor::zeros({s.d}, DType::F32, dev, "dk")),
               Error);  // dx is x
}

}  // namespace
}  // namespace tandem::ops
