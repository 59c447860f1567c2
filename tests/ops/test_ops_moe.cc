// The mixture-of-experts ops on the CPU: the router's softmax and top-k against a float64 reference (ties to the lower
// expert, the normalised weights), its backward against finite differences of the weights and the balance term, the
// balance sums and loss, the stable grouping by expert, the gather and combine against direct loops in every compute
// dtype and the combine's backward against finite differences; the planner's balanced rows on the counting device;
// the grouped products' scratch as the counting device allocates it; refused shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops_test_util.h"
#include "tandem/device/counting_device.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using device::CpuDevice;
using testing::from_double;
using testing::from_double_as;
using testing::numeric_grad;
using testing::randn;
using testing::randn_as;
using testing::rel_error;
using testing::to_double;
using testing::values;

// softmax of each row of logits (n, e) in double.
std::vector<double> softmax(const std::vector<double>& logits, int64_t n, int64_t e) {
  std::vector<double> p(logits.size());
  for (int64_t i = 0; i < n; ++i) {
    const double top = *std::max_element(logits.begin() + i * e, logits.begin() + (i + 1) * e);
    double sum = 0;
    for (int64_t j = 0; j < e; ++j) sum += (p[i * e + j] = std::exp(logits[i * e + j] - top));
    for (int64_t j = 0; j < e; ++j) p[i * e + j] /= sum;
  }
  return p;
}

// The experts a row chooses: the k largest, largest first, equal ones lower expert first.
std::vector<int> top_k(const std::vector<double>& p, int64_t i, int64_t e, int k) {
  std::vector<int> order(static_cast<size_t>(e));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[i * e + a] > p[i * e + b]; });
  order.resize(static_cast<size_t>(k));
  return order;
}

// The weights (n, k) for fixed choices, in double: a smooth function of the logits while the choices do not change.
std::vector<double> chosen_weights(const std::vector<double>& logits, const std::vector<int32_t>& idx, int64_t n,
                                   int64_t e, int k, bool normalize) {
  const std::vector<double> p = softmax(logits, n, e);
  std::vector<double> w(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int s = 0; s < k; ++s) sum += p[i * e + idx[i * k + s]];
    for (int s = 0; s < k; ++s) w[i * k + s] = p[i * e + idx[i * k + s]] / (normalize ? sum : 1.0);
  }
  return w;
}

struct Routed {
  Tensor probs, idx, weights;
};

Routed route(CpuDevice& dev, const Tensor& logits, int k, bool normalize) {
  const int64_t n = logits.dim(0), e = logits.dim(1);
  Routed r{Tensor::empty({n, e}, DType::F32, dev, "probs"), Tensor::empty({n, k}, DType::I32, dev, "idx"),
           Tensor::empty({n, k}, DType::F32, dev, "weights")};
  moe_route(logits, k, normalize, r.probs, r.idx, r.weights);
  return r;
}

std::vector<int32_t> ints(const Tensor& t) { return std::vector<int32_t>(t.i32(), t.i32() + t.numel()); }

class MoeRoute : public ::testing::TestWithParam<bool> {};

TEST_P(MoeRoute, ChoosesTheLargestAndWeighsThem) {
  CpuDevice dev;
  const bool normalize = GetParam();
  const int64_t n = 7, e = 6;
  const int k = 3;
  const Tensor logits = randn(dev, {n, e}, 11);
  const Routed r = route(dev, logits, k, normalize);
  const std::vector<double> p = softmax(to_double(logits), n, e);
  EXPECT_LT(rel_error(to_double(r.probs), p), 1e-6);
  std::vector<int32_t> want;
  for (int64_t i = 0; i < n; ++i)
    for (int j : top_k(p, i, e, k)) want.push_back(j);
  EXPECT_EQ(ints(r.idx), want);
  EXPECT_LT(rel_error(to_double(r.weights), chosen_weights(to_double(logits), want, n, e, k, normalize)), 1e-6);
}

TEST_P(MoeRoute, BackwardMatchesFiniteDifferences) {
  CpuDevice dev;
  const bool normalize = GetParam();
  const int64_t n = 5, e = 8;
  const int k = 2;
  const Tensor logits = randn(dev, {n, e}, 21);
  const Routed r = route(dev, logits, k, normalize);
  const std::vector<int32_t> idx = ints(r.idx);
  const Tensor dweights = randn(dev, {n, k}, 22), aux = randn(dev, {e}, 23);
  Tensor dlogits = Tensor::empty({n, e}, DType::F32, dev, "dlogits");
  moe_route_backward(r.probs, r.idx, dweights, normalize, aux, dlogits);
  // L = sum dweights * weights + sum over rows of aux . probs, with the choices held fixed.
  std::vector<double> w = to_double(dweights);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < e; ++j) w.push_back(to_double(aux)[j]);
  const auto both = [&](const std::vector<double>& x) {
    std::vector<double> out = chosen_weights(x, idx, n, e, k, normalize);
    const std::vector<double> p = softmax(x, n, e);
    out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  EXPECT_LT(rel_error(to_double(dlogits), numeric_grad(both, to_double(logits), w)), 1e-5);
  // Without the balance term only the weights' gradient flows.
  moe_route_backward(r.probs, r.idx, dweights, normalize, Tensor(), dlogits);
  const auto weights_of = [&](const std::vector<double>& x) { return chosen_weights(x, idx, n, e, k, normalize); };
  EXPECT_LT(rel_error(to_double(dlogits), numeric_grad(weights_of, to_double(logits), to_double(dweights))), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Normalize, MoeRoute, ::testing::Bool());

TEST(MoeOps, EqualProbabilitiesGoToTheLowerExpert) {
  CpuDevice dev;
  const Tensor logits = from_double(dev, {1, 4}, {0.5, 2.0, 0.5, 2.0});
  const Routed r = route(dev, logits, 3, false);
  EXPECT_EQ(ints(r.idx), (std::vector<int32_t>{1, 3, 0}));
}

TEST(MoeOps, BalanceSumsAndLoss) {
  CpuDevice dev;
  const int64_t n = 6, e = 4;
  const int k = 2;
  const Routed r = route(dev, randn(dev, {n, e}, 31), k, true);
  Tensor counts = Tensor::zeros({e}, DType::F32, dev, "counts"), probsum = Tensor::zeros({e}, DType::F32, dev, "ps");
  moe_route_stats(r.probs, r.idx, counts, probsum);
  moe_route_stats(r.probs, r.idx, counts, probsum);  // accumulates
  std::vector<double> want_counts(e, 0.0), want_sum(e, 0.0);
  for (int32_t j : ints(r.idx)) want_counts[j] += 2;
  const std::vector<double> p = to_double(r.probs);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < e; ++j) want_sum[j] += 2 * p[i * e + j];
  EXPECT_EQ(to_double(counts), want_counts);
  EXPECT_LT(rel_error(to_double(probsum), want_sum), 1e-6);
  Tensor sum = from_double(dev, {1}, {1.5});
  moe_aux_loss(counts, probsum, 0.25f, sum);
  double dot = 0;
  for (int64_t j = 0; j < e; ++j) dot += want_counts[j] * want_sum[j];
  EXPECT_NEAR(sum.f32()[0], 1.5 + 0.25 * dot, 1e-5);
}

TEST(MoeOps, OrderGroupsByExpertStably) {
  CpuDevice dev;
  const std::vector<int32_t> choices = {2, 0, 1, 2, 2, 1, 0, 2};  // (4, 2)
  Tensor idx = testing::ids_tensor(dev, choices).view({4, 2});
  Tensor pos = Tensor::empty({4, 2}, DType::I32, dev, "pos"), offsets = Tensor::empty({4}, DType::I32, dev, "off");
  moe_order(idx, 3, pos, offsets);
  EXPECT_EQ(ints(offsets), (std::vector<int32_t>{0, 2, 4, 8}));
  // expert 0: choices 1, 6; expert 1: 2, 5; expert 2: 0, 3, 4, 7.
  EXPECT_EQ(ints(pos), (std::vector<int32_t>{4, 0, 2, 5, 6, 3, 1, 7}));
  EXPECT_EQ(moe_expert_rows(offsets, 8), (std::vector<int64_t>{2, 2, 4}));
  EXPECT_NE(testing::error_of([&] { moe_expert_rows(offsets, 9); }).find("not 0 to 9"), std::string::npos);
  Tensor bad = testing::ids_tensor(dev, {0, 3}).view({1, 2});
  EXPECT_NE(testing::error_of([&] { moe_order(bad, 3, pos.rows(0, 1), offsets); }).find("names expert 3 of 3"),
            std::string::npos);
}

TEST(MoeOps, CountingDeviceAssumesBalancedRows) {
  device::CountingDevice dev(DeviceKind::Cuda);
  const Tensor offsets = Tensor::empty({5}, DType::I32, dev, "offsets");
  EXPECT_EQ(moe_expert_rows(offsets, 10), (std::vector<int64_t>{3, 3, 2, 2}));
}

class MoeRows : public ::testing::TestWithParam<DType> {};

TEST_P(MoeRows, GatherAndCombineMoveRowsBetweenTokensAndExperts) {
  CpuDevice dev;
  const DType dt = GetParam();
  const int64_t n = 5, c = 6;
  const int k = 2;
  const Routed r = route(dev, randn(dev, {n, 4}, 41), k, true);
  Tensor pos = Tensor::empty({n, k}, DType::I32, dev, "pos"), offsets = Tensor::empty({5}, DType::I32, dev, "off");
  moe_order(r.idx, 4, pos, offsets);
  const std::vector<int32_t> at = ints(pos);
  const Tensor x = randn_as(dev, {n, c}, 42, dt);
  Tensor xg = Tensor::empty({n * k, c}, dt, dev, "xg");
  moe_gather(x, pos, xg);
  const std::vector<double> xv = values(x), xgv = values(xg);
  for (int64_t i = 0; i < n; ++i)
    for (int s = 0; s < k; ++s)
      for (int64_t j = 0; j < c; ++j) ASSERT_EQ(xgv[at[i * k + s] * c + j], xv[i * c + j]);
  // y = y0 + sum_s w yg[pos]; the weights undefined are ones.
  const Tensor yg = randn_as(dev, {n * k, c}, 43, dt), y0 = randn_as(dev, {n, c}, 44, dt);
  const std::vector<double> ygv = values(yg), wv = to_double(r.weights);
  for (const bool weighted : {true, false}) {
    Tensor y = testing::copy_of(dev, y0);
    moe_combine(yg, pos, weighted ? r.weights : Tensor(), y);
    std::vector<double> want = values(y0);
    for (int64_t i = 0; i < n; ++i)
      for (int s = 0; s < k; ++s)
        for (int64_t j = 0; j < c; ++j)
          want[i * c + j] += (weighted ? wv[i * k + s] : 1.0) * ygv[at[i * k + s] * c + j];
    EXPECT_LT(rel_error(values(y), want), testing::tolerance(dt, 1e-6));
  }
}

TEST_P(MoeRows, CombineBackwardMatchesFiniteDifferences) {
  CpuDevice dev;
  const DType dt = GetParam();
  const int64_t n = 4, c = 3;
  const int k = 2;
  const Routed r = route(dev, randn(dev, {n, 3}, 51), k, false);
  Tensor pos = Tensor::empty({n, k}, DType::I32, dev, "pos"), offsets = Tensor::empty({4}, DType::I32, dev, "off");
  moe_order(r.idx, 3, pos, offsets);
  const std::vector<int32_t> at = ints(pos);
  const Tensor yg = randn_as(dev, {n * k, c}, 52, dt), dy = randn_as(dev, {n, c}, 53, dt);
  Tensor dyg = Tensor::empty({n * k, c}, dt, dev, "dyg"), dw = Tensor::empty({n, k}, DType::F32, dev, "dw");
  moe_combine_backward(dy, yg, pos, r.weights, dyg, dw);
  // y(yg, w) = sum_s w yg[pos]: the gradient by yg and by w.
  const std::vector<double> ygv = values(yg), wv = to_double(r.weights);
  const auto combine = [&](const std::vector<double>& rows, const std::vector<double>& w) {
    std::vector<double> y(static_cast<size_t>(n * c), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int s = 0; s < k; ++s)
        for (int64_t j = 0; j < c; ++j) y[i * c + j] += w[i * k + s] * rows[at[i * k + s] * c + j];
    return y;
  };
  const auto by_rows = [&](const std::vector<double>& rows) { return combine(rows, wv); };
  const auto by_weights = [&](const std::vector<double>& w) { return combine(ygv, w); };
  EXPECT_LT(rel_error(values(dyg), numeric_grad(by_rows, ygv, values(dy))), testing::tolerance(dt, 1e-6));
  EXPECT_LT(rel_error(to_double(dw), numeric_grad(by_weights, wv, values(dy))), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MoeRows, ::testing::ValuesIn(testing::compute_dtypes()), testing::dtype_label);

TEST(MoeOps, GroupedProductsAreEachGroupsProduct) {
  // Groups of 3, 0 and 2 rows against a stack of 3 matrices, both forms of b, and the weight gradients accumulating.
  CpuDevice dev;
  const std::vector<int64_t> rows = {3, 0, 2};
  const int64_t m = 5, n = 4, k = 6;
  const Tensor a = randn(dev, {m, k}, 71), b = randn(dev, {3, n, k}, 72), bt = randn(dev, {3, k, n}, 73);
  const std::vector<double> av = to_double(a), bv = to_double(b), btv = to_double(bt);
  for (const bool trans_b : {true, false}) {
    Tensor c = Tensor::empty({m, n}, DType::F32, dev, "c");
    grouped_matmul(a, trans_b ? b : bt, c, rows, trans_b);
    std::vector<double> want(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0, g = 0, left = rows[0]; i < m; ++i, --left) {
      while (left == 0) left = rows[++g];
      for (int64_t j = 0; j < n; ++j)
        for (int64_t q = 0; q < k; ++q)
          want[i * n + j] += av[i * k + q] * (trans_b ? bv[(g * n + j) * k + q] : btv[(g * k + q) * n + j]);
    }
    EXPECT_LT(rel_error(to_double(c), want), 1e-6);
  }
  const Tensor dy = randn(dev, {m, n}, 74);
  Tensor dw = randn(dev, {3, n, k}, 75);
  std::vector<double> want = to_double(dw);
  const std::vector<double> dyv = to_double(dy);
  grouped_weight_grad(dy, a, dw, rows);
  for (int64_t i = 0, g = 0, left = rows[0]; i < m; ++i, --left) {
    while (left == 0) left = rows[++g];
    for (int64_t j = 0; j < n; ++j)
      for (int64_t q = 0; q < k; ++q) want[(g * n + j) * k + q] += dyv[i * n + j] * av[i * k + q];
  }
  EXPECT_LT(rel_error(to_double(dw), want), 1e-6);
  Tensor c = Tensor::empty({m, n}, DType::F32, dev, "c");
  EXPECT_NE(testing::error_of([&] {
              grouped_matmul(a, b, c, {3, 1, 2}, true);
            }).find("the groups hold 6 rows"),
            std::string::npos);
}

// The grouped products' scratch (the CPU's fp32 copies, a small product's rows padded, one group at a time) goes
// through the device and is returned; its peak is the backend's scratch entry, which the counting device allocates for
// the planner.
TEST(MoeOps, GroupedProductsScratchIsWhatTheCountingDeviceAllocates) {
  CpuDevice dev;
  device::CountingDevice counting(DeviceKind::Cpu);
  const std::vector<int64_t> rows = {3, 0, 2};
  const auto planned = [&](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), counting, "planned"); };
  for (const bool weight_grad : {false, true}) {
    // The weight gradient's product is transposed (never padded): in bf16, so its operands are widened.
    const DType dtype = weight_grad ? DType::BF16 : DType::F32;
    const Tensor a = randn_as(dev, {5, 6}, 81, dtype), b = randn_as(dev, {3, 4, 6}, 82, dtype);
    const Tensor dy = randn_as(dev, {5, 4}, 83, dtype);
    const Tensor c = Tensor::empty({5, 4}, DType::F32, dev, "c"), dw = Tensor::zeros({3, 4, 6}, DType::F32, dev, "dw");
    const Tensor pa = planned(a), pb = planned(b), pdy = planned(dy), pc = planned(c), pdw = planned(dw);
    const uint64_t live = dev.live_bytes(), planned_live = counting.live_bytes();
    dev.reset_peak();
    counting.reset_peak();
    if (weight_grad) {
      grouped_weight_grad(dy, a, dw, rows);
      grouped_weight_grad(pdy, pa, pdw, rows);
    } else {
      grouped_matmul(a, b, c, rows, true);
      grouped_matmul(pa, pb, pc, rows, true);
    }
    EXPECT_EQ(dev.live_bytes(), live);
    EXPECT_GT(dev.peak_bytes(), live) << weight_grad;
    EXPECT_EQ(counting.peak_bytes() - planned_live, dev.peak_bytes() - live) << weight_grad;
  }
}

// The counting backend records the 16-bit grouped products as grouped FLOPs, which the time model prices at their own
// rate (many small products run slower than one large one), and the fp32 ones as fp32 products: 2 x each group's rows
// x the stack's (N, K) matrix, forward and weight gradient alike.
TEST(MoeOps, CountingBackendRecordsGroupedFlopsApart) {
  const std::vector<int64_t> rows = {3, 0, 2};
  for (const DType dtype : {DType::BF16, DType::F32}) {
    device::CountingDevice dev(DeviceKind::Cuda);
    const Tensor a = Tensor::empty({5, 6}, dtype, dev, "a"), b = Tensor::empty({3, 4, 6}, dtype, dev, "b");
    const Tensor c = Tensor::empty({5, 4}, dtype, dev, "c"), dw = Tensor::empty({3, 4, 6}, dtype, dev, "dw");
    grouped_matmul(a, b, c, rows, true);
    grouped_weight_grad(c, a, dw, rows);
    const double flops = 2 * 2.0 * 5 * 4 * 6;
    const device::WorkLog w = dev.work();
    EXPECT_DOUBLE_EQ(w.grouped_flops, dtype == DType::F32 ? 0.0 : flops) << dtype_name(dtype);
    EXPECT_DOUBLE_EQ(w.gemm_flops_fp32, dtype == DType::F32 ? flops : 0.0) << dtype_name(dtype);
    EXPECT_DOUBLE_EQ(w.gemm_flops, 0.0);
  }
}

TEST(MoeOps, RefusesMismatchedShapes) {
  CpuDevice dev;
  const Tensor logits = randn(dev, {3, 4}, 61);
  Tensor probs = Tensor::empty({3, 4}, DType::F32, dev, "p"), idx = Tensor::empty({3, 5}, DType::I32, dev, "i");
  Tensor w = Tensor::empty({3, 5}, DType::F32, dev, "w");
  EXPECT_NE(testing::error_of([&] { moe_route(logits, 5, true, probs, idx, w); }).find("0 < k <= E"),
            std::string::npos);
  const Tensor x = randn(dev, {3, 2}, 62);
  Tensor pos = Tensor::empty({3, 2}, DType::I32, dev, "pos"), xg = Tensor::empty({5, 2}, DType::F32, dev, "xg");
  EXPECT_NE(testing::error_of([&] { moe_gather(x, pos, xg); }).find("xg (5, 2) is not (6, 2)"), std::string::npos);
}

}  // namespace
}  // namespace tandem::ops
