// The mixture-of-experts MLP against a float64 reference of transformers' sparse block: the output, and the gradients
// of the input, the router and the experts by finite differences, with and without the balance loss's term and the
// norm of the top-k weights; the balance sums only from a counting forward.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../ops/ops_test_util.h"
#include "tandem/nn/moe.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {
namespace {

using device::CpuDevice;
using testing::numeric_grad;
using testing::randn;
using testing::rel_error;
using testing::to_double;

constexpr int64_t kN = 6, kC = 4, kF = 3;
constexpr int kE = 4, kK = 2;

// The layer's output for inputs x (N, C) and weights router (E, C), gate_up (E, 2F, C), down (E, C, F), with the
// choices `idx` (N, k) held fixed, in double; plus, as the last E values, each expert's column sum of probabilities.
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& router,
                              const std::vector<double>& gate_up, const std::vector<double>& down,
                              const std::vector<int32_t>& idx, bool normalize) {
  std::vector<double> y(static_cast<size_t>(kN * kC), 0.0), colsum(kE, 0.0);
  for (int64_t t = 0; t < kN; ++t) {
    std::vector<double> p(kE);
    double top = -1e300, sum = 0;
    for (int e = 0; e < kE; ++e) {
      p[e] = 0;
      for (int64_t c = 0; c < kC; ++c) p[e] += x[t * kC + c] * router[e * kC + c];
      top = std::max(top, p[e]);
    }
    for (int e = 0; e < kE; ++e) sum += (p[e] = std::exp(p[e] - top));
    for (int e = 0; e < kE; ++e) colsum[e] += (p[e] /= sum);
    double picked = 0;
    for (int s = 0; s < kK; ++s) picked += p[idx[t * kK + s]];
    for (int s = 0; s < kK; ++s) {
      const int e = idx[t * kK + s];
      const double w = p[e] / (normalize ? picked : 1.0);
      std::vector<double> h(kF);
      for (int64_t f = 0; f < kF; ++f) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < kC; ++c) {
          g += gate_up[(e * 2 * kF + f) * kC + c] * x[t * kC + c];
          u += gate_up[(e * 2 * kF + kF + f) * kC + c] * x[t * kC + c];
        }
        h[f] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t c = 0; c < kC; ++c)
        for (int64_t f = 0; f < kF; ++f) y[t * kC + c] += w * down[(e * kC + c) * kF + f] * h[f];
    }
  }
  y.insert(y.end(), colsum.begin(), colsum.end());
  return y;
}

struct Case : ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(Case, MatchesTheReferenceAndItsGradients) {
  const auto [normalize, balanced] = GetParam();
  CpuDevice dev;
  MoeMlp layer("layers.0.moe", MoeShape{kC, kF, kE, kK, normalize});
  uint64_t seed = 70;
  for (Parameter* p : layer.parameters()) {
    p->value = randn(dev, p->shape, ++seed, 0.7f);
    p->grad = Tensor::zeros(p->shape, DType::F32, dev, "grad");
  }
  const auto params = layer.parameters();  // router, gate_up, down
  const Tensor x = randn(dev, {kN, kC}, 80), residual = randn(dev, {kN, kC}, 81), dy = randn(dev, {kN, kC}, 82);
  MoeBalance balance;
  balance.counts = Tensor::zeros({kE}, DType::F32, dev, "counts");
  balance.probsum = Tensor::zeros({kE}, DType::F32, dev, "probsum");
  balance.rows = 2 * kN;
  balance.coef = balanced ? 0.3f : 0.0f;
  balance.share = 0.5;
  const LossSink sink{Tensor::zeros({1}, DType::F32, dev, "loss"), 1.0, 1.0f};
  Batch batch;
  batch.loss = &sink;
  batch.balance = &balance;
  Saved saved;
  const Tensor y = layer.forward_add(x, residual, batch, saved, true);
  // The choices the layer made, held fixed for the reference.
  const Tensor choices = saved.tensors.at(2);
  const std::vector<int32_t> idx(choices.i32(), choices.i32() + choices.numel());
  const std::vector<double> xv = to_double(x), rv = to_double(params[0]->value), gv = to_double(params[1]->value),
                            dv = to_double(params[2]->value);
  std::vector<double> want = reference(xv, rv, gv, dv, idx, normalize);
  const std::vector<double> colsum(want.end() - kE, want.end());
  want.resize(kN * kC);
  for (size_t i = 0; i < want.size(); ++i) want[i] += to_double(residual)[i];
  EXPECT_LT(rel_error(to_double(y), want), 1e-5);
  // The balance sums of this one layer: its choices and probabilities.
  std::vector<double> counts(kE, 0.0);
  for (int32_t e : idx) counts[e] += 1;
  EXPECT_EQ(to_double(balance.counts), counts);
  EXPECT_LT(rel_error(to_double(balance.probsum), colsum), 1e-6);

  const Tensor dx = layer.backward(dy, batch, saved);
  // L = dy . y + coef share E / R^2 sum_e C_e P_e, the counts held.
  std::vector<double> w = to_double(dy);
  const double r = 2.0 * kN;
  for (int e = 0; e < kE; ++e) w.push_back(balanced ? 0.3 * 0.5 * kE * counts[e] / (r * r) : 0.0);
  using Fn = testing::DoubleFn;
  const Fn by_x = [&](const std::vector<double>& v) { return reference(v, rv, gv, dv, idx, normalize); };
  const Fn by_router = [&](const std::vector<double>& v) { return reference(xv, v, gv, dv, idx, normalize); };
  const Fn by_gate_up = [&](const std::vector<double>& v) { return reference(xv, rv, v, dv, idx, normalize); };
  const Fn by_down = [&](const std::vector<double>& v) { return reference(xv, rv, gv, v, idx, normalize); };
  EXPECT_LT(rel_error(to_double(dx), numeric_grad(by_x, xv, w)), 1e-5);
  EXPECT_LT(rel_error(to_double(params[0]->grad), numeric_grad(by_router, rv, w)), 1e-5);
  EXPECT_LT(rel_error(to_double(params[1]->grad), numeric_grad(by_gate_up, gv, w)), 1e-5);
  EXPECT_LT(rel_error(to_double(params[2]->grad), numeric_grad(by_down, dv, w)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(NormalizeAndBalance, Case, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(MoeMlp, OnlyACountingForwardAddsToTheBalance) {
  CpuDevice dev;
  MoeMlp layer("moe", MoeShape{kC, kF, kE, kK, true});
  uint64_t seed = 90;
  for (Parameter* p : layer.parameters()) p->value = randn(dev, p->shape, ++seed);
  MoeBalance balance;
  balance.counts = Tensor::zeros({kE}, DType::F32, dev, "counts");
  balance.probsum = Tensor::zeros({kE}, DType::F32, dev, "probsum");
  balance.rows = kN;
  balance.coef = 0.1f;
  balance.share = 1.0;
  Batch batch;
  batch.balance = &balance;
  const Tensor x = randn(dev, {kN, kC}, 95);
  Saved saved;
  layer.forward_add(x, x, batch, saved, false);
  EXPECT_EQ(to_double(balance.counts), std::vector<double>(kE, 0.0));
  layer.forward_add(x, x, batch, saved, true);
  double total = 0;
  for (double c : to_double(balance.counts)) total += c;
  EXPECT_EQ(total, kN * kK);
}

// The per-layer tables: the layer adds its sums to its own row (MoeShape::index), the same as the totals', and
// leaves the other layers' rows alone.
TEST(MoeMlp, AddsItsSumsToItsOwnRowOfThePerLayerTables) {
  CpuDevice dev;
  MoeShape shape{kC, kF, kE, kK, true};
  shape.index = 1;
  MoeMlp layer("layers.3.moe", shape);
  uint64_t seed = 110;
  for (Parameter* p : layer.parameters()) p->value = randn(dev, p->shape, ++seed);
  MoeBalance balance;
  balance.counts = Tensor::zeros({kE}, DType::F32, dev, "counts");
  balance.probsum = Tensor::zeros({kE}, DType::F32, dev, "probsum");
  balance.rows = 2 * kN;
  balance.coef = 0.0f;
  balance.share = 1.0;
  balance.layer_counts = Tensor::zeros({2, kE}, DType::F32, dev, "layer counts");    // (2, E)
  balance.layer_probsum = Tensor::zeros({2, kE}, DType::F32, dev, "layer probsum");  // (2, E)
  Batch batch;
  batch.balance = &balance;
  const Tensor x = randn(dev, {kN, kC}, 115);
  Saved saved;
  layer.forward_add(x, x, batch, saved, true);
  const std::vector<double> counts = to_double(balance.layer_counts), probs = to_double(balance.layer_probsum);
  EXPECT_EQ(std::vector<double>(counts.begin(), counts.begin() + kE), std::vector<double>(kE, 0.0));
  EXPECT_EQ(std::vector<double>(probs.begin(), probs.begin() + kE), std::vector<double>(kE, 0.0));
  EXPECT_EQ(std::vector<double>(counts.begin() + kE, counts.end()), to_double(balance.counts));
  EXPECT_EQ(std::vector<double>(probs.begin() + kE, probs.end()), to_double(balance.probsum));
}

}  // namespace
}  // namespace tandem::nn
