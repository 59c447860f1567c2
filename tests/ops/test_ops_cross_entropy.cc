// Softmax cross-entropy against a float64 reference and finite differences; bad targets; large logits; the
// 16-bit compute dtypes with f32 statistics; the sharded statistics joined by cross_entropy_finish; refused dtypes.
#include <gtest/gtest.h>

#include <cmath>

#include "ops_test_util.h"
#include "tandem/ops/op_list.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::ids_tensor;
using testing::numeric_grad;
using testing::randn;
using testing::randn_as;
using testing::rel_error;
using testing::to_double;
using testing::tolerance;
using testing::values;

constexpr int64_t kN = 7, kV = 11;
const std::vector<int32_t> kTargets = {0, 10, 3, 3, 5, 9, 1};

// losses (N) = lse - logits[target] per row, in double; fills lse (N) when given.
std::vector<double> reference(const std::vector<double>& logits, std::vector<double>* lse = nullptr) {
  std::vector<double> losses;
  for (int64_t i = 0; i < kN; ++i) {
    double mx = logits[i * kV];
    for (int64_t j = 1; j < kV; ++j) mx = std::max(mx, logits[i * kV + j]);
    double sum = 0;
    for (int64_t j = 0; j < kV; ++j) sum += std::exp(logits[i * kV + j] - mx);
    const double row_lse = mx + std::log(sum);
    if (lse) lse->push_back(row_lse);
    losses.push_back(row_lse - logits[i * kV + kTargets[i]]);
  }
  return losses;
}

struct Outputs {
  Tensor losses, lse;
};

Outputs forward(Device& dev, const Tensor& logits, const Tensor& targets) {
  Outputs r{Tensor::empty({kN}, DType::F32, dev, "losses"), Tensor::empty({kN}, DType::F32, dev, "lse")};
  cross_entropy_forward(logits, targets, r.losses, r.lse);
  return r;
}

TEST(OpsCrossEntropy, ForwardMatchesDouble) {
  device::CpuDevice dev;
  Tensor logits = randn(dev, {kN, kV}, 1, 3.0f);  // (N, V)
  const Outputs r = forward(dev, logits, ids_tensor(dev, kTargets));
  std::vector<double> want_lse;
  const auto want = reference(to_double(logits), &want_lse);
  EXPECT_LT(rel_error(to_double(r.losses), want), 1e-6);
  EXPECT_LT(rel_error(to_double(r.lse), want_lse), 1e-6);
}

TEST(OpsCrossEntropy, BackwardMatchesFiniteDifferencesOfTheMean) {
  device::CpuDevice dev;
  Tensor logits = randn(dev, {kN, kV}, 2, 3.0f);  // (N, V)
  Tensor targets = ids_tensor(dev, kTargets);     // (N)
  const Outputs r = forward(dev, logits, targets);
  // The mean loss: every row weighted 1/N, which is the op's `scale`.
  const std::vector<double> w(kN, 1.0 / kN);
  const auto want = numeric_grad([](const auto& x) { return reference(x); }, to_double(logits), w);
  Tensor dlogits = Tensor::empty({kN, kV}, DType::F32, dev, "dlogits");  // (N, V)
  cross_entropy_backward(logits, targets, r.lse, 1.0f / kN, dlogits);
  EXPECT_LT(rel_error(to_double(dlogits), want), 1e-5);

  // In place: the gradient overwrites the logits and must come out the same.
  cross_entropy_backward(logits, targets, r.lse, 1.0f / kN, logits);
  EXPECT_TRUE(testing::bit_equal(logits, dlogits));
}

TEST(OpsCrossEntropy, LargeLogitsStayFinite) {
  device::CpuDevice dev;
  Tensor logits = randn(dev, {kN, kV}, 3, 1000.0f);  // exp would overflow without the max subtraction
  Tensor targets = ids_tensor(dev, kTargets);
  const Outputs r = forward(dev, logits, targets);
  EXPECT_LT(rel_error(to_double(r.losses), reference(to_double(logits))), 1e-6);
  Tensor dlogits = Tensor::empty({kN, kV}, DType::F32, dev, "dlogits");
  cross_entropy_backward(logits, targets, r.lse, 1.0f, dlogits);
  for (int64_t i = 0; i < dlogits.numel(); ++i) EXPECT_TRUE(std::isfinite(dlogits.f32()[i])) << i;
}

// Tensor parallelism splits the vocabulary: slots of 5 and 6 columns, joined the way the loss layer joins them
// (max and sums over slots), must reproduce the unsharded loss and gradient.
TEST(OpsCrossEntropy, ShardedStatisticsJoinToTheFullLoss) {
  device::CpuDevice dev;
  const int64_t widths[2] = {5, 6}, starts[2] = {0, 5};  // vocab 11 = kV
  Tensor logits = randn(dev, {kN, kV}, 30, 3.0f);        // (N, V)
  Tensor targets = ids_tensor(dev, kTargets);            // (N)
  Tensor slot_logits[2];                                 // (N, V_local) each
  for (int s = 0; s < 2; ++s) {
    slot_logits[s] = Tensor::empty({kN, widths[s]}, DType::F32, dev, "slot logits");
    for (int64_t i = 0; i < kN; ++i)
      for (int64_t j = 0; j < widths[s]; ++j)
        slot_logits[s].f32()[i * widths[s] + j] = logits.f32()[i * kV + starts[s] + j];
  }
  std::vector<double> row_max(kN, -1e30), target(kN, 0.0), sum(kN, 0.0);  // (N) each, joined over slots
  for (int s = 0; s < 2; ++s) {
    Tensor mx = Tensor::empty({kN}, DType::F32, dev, "row max");
    Tensor tl = Tensor::empty({kN}, DType::F32, dev, "target logit");
    cross_entropy_stats(slot_logits[s], targets, starts[s], kV, mx, tl);
    for (int64_t i = 0; i < kN; ++i) {
      row_max[i] = std::max(row_max[i], double(mx.f32()[i]));
      target[i] += tl.f32()[i];
    }
  }
  Tensor global_max = testing::from_double(dev, {kN}, row_max);
  for (int s = 0; s < 2; ++s) {
    Tensor se = Tensor::empty({kN}, DType::F32, dev, "sum exp");
    row_sum_exp(slot_logits[s], global_max, se);
    for (int64_t i = 0; i < kN; ++i) sum[i] += se.f32()[i];
  }
  std::vector<double> lse(kN), losses(kN);
  for (int64_t i = 0; i < kN; ++i) {
    lse[i] = row_max[i] + std::log(sum[i]);
    losses[i] = lse[i] - target[i];
  }
  EXPECT_LT(rel_error(losses, reference(to_double(logits))), 1e-6);

  Tensor lse_t = testing::from_double(dev, {kN}, lse);
  Tensor full = Tensor::empty({kN, kV}, DType::F32, dev, "dlogits");  // (N, V)
  cross_entropy_backward(logits, targets, lse_t, 0.5f, full);
  for (int s = 0; s < 2; ++s) {
    cross_entropy_backward(slot_logits[s], targets, lse_t, 0.5f, slot_logits[s], starts[s]);  // in place
    for (int64_t i = 0; i < kN; ++i)
      for (int64_t j = 0; j < widths[s]; ++j)
        EXPECT_EQ(slot_logits[s].f32()[i * widths[s] + j], full.f32()[i * kV + starts[s] + j]) << i << "," << j;
  }

  Tensor mx = Tensor::empty({kN}, DType::F32, dev, "row max");
  EXPECT_THROW(cross_entropy_stats(slot_logits[1], ids_tensor(dev, {0, 1, 2, 3, 4, 5, 11}), 5, kV, mx, mx), Error);
}

TEST(OpsCrossEntropy, OutOfRangeTargetThrowsNamingIt) {
  device::CpuDevice dev;
  Tensor logits = randn(dev, {3, kV}, 4);
  Tensor losses = Tensor::empty({3}, DType::F32, dev, "losses");
  Tensor lse = Tensor::empty({3}, DType::F32, dev, "lse");
  for (int32_t bad : {11, -3, 99999}) {
    Tensor targets = ids_tensor(dev, {1, 2, bad});
    try {
      cross_entropy_forward(logits, targets, losses, lse);
      FAIL() << "expected an Error for target " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("id " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("vocabulary of 11"), std::string::npos) << msg;
    }
    Tensor dlogits = Tensor::empty({3, kV}, DType::F32, dev, "dlogits");
    EXPECT_THROW(cross_entropy_backward(logits, targets, lse, 1.0f, dlogits), Error);
  }
}

TEST(OpsCrossEntropyFinish, TurnsSumExpIntoLseAndAccumulatesTheLoss) {
  device::CpuDevice dev;
  const std::vector<double> row_max = {1.5, -2.0, 30.0, 0.0}, target = {0.25, -3.0, 29.0, -1.0},
                            sum_exp = {1.0, 2.5, 17.0, 1000.0};
  Tensor mx = testing::from_double(dev, {2, 2}, row_max);  // (B, T): any shape of N elements
  Tensor tl = testing::from_double(dev, {2, 2}, target);
  Tensor lse = testing::from_double(dev, {2, 2}, sum_exp);  // sum_exp in, lse out
  Tensor loss_sum = testing::from_double(dev, {1}, {0.5});  // accumulates
  Tensor targets = ids_tensor(dev, {1, 2, 3, 4});           // every row counts
  cross_entropy_finish(mx, tl, lse, targets, loss_sum);
  std::vector<double> want_lse(4);
  double want_sum = 0.5;
  for (int i = 0; i < 4; ++i) {
    want_lse[i] = row_max[i] + std::log(sum_exp[i]);
    want_sum += want_lse[i] - target[i];
  }
  EXPECT_LT(rel_error(values(lse), want_lse), 1e-7);
  EXPECT_NEAR(loss_sum.f32()[0], want_sum, 1e-6 * std::fabs(want_sum));

  EXPECT_THROW(cross_entropy_finish(mx, tl, lse, targets, Tensor::zeros({2}, DType::F32, dev, "two")), Error);
  EXPECT_THROW(cross_entropy_finish(mx, Tensor::zeros({3}, DType::F32, dev, "three"), lse, targets, loss_sum), Error);
  EXPECT_THROW(cross_entropy_finish(mx, tl, Tensor::zeros({2, 2}, DType::BF16, dev, "lse"), targets, loss_sum), Error);
  EXPECT_THROW(cross_entropy_finish(mx, tl, lse, targets, Tensor::zeros({1}, DType::BF16, dev, "loss")), Error);
  EXPECT_THROW(cross_entropy_finish(mx, tl, lse, ids_tensor(dev, {1, 2, 3}), loss_sum), Error);
}

// Rows whose target is kIgnoreTarget (a masked position) count nothing: loss 0 and a zero gradient row in the
// unsharded ops, and in the sharded ones no target logit and nothing added by finish; the other rows are unchanged.
TEST(OpsCrossEntropy, IgnoredTargetsHaveNoLossAndNoGradient) {
  device::CpuDevice dev;
  std::vector<int32_t> masked = kTargets;
  masked[1] = masked[4] = kIgnoreTarget;
  Tensor logits = randn(dev, {kN, kV}, 5, 3.0f);  // (N, V)
  const Outputs all = forward(dev, logits, ids_tensor(dev, kTargets));
  const Outputs r = forward(dev, logits, ids_tensor(dev, masked));
  Tensor d_all = Tensor::empty({kN, kV}, DType::F32, dev, "d all"), d = Tensor::empty({kN, kV}, DType::F32, dev, "d");
  cross_entropy_backward(logits, ids_tensor(dev, kTargets), all.lse, 0.5f, d_all);
  cross_entropy_backward(logits, ids_tensor(dev, masked), r.lse, 0.5f, d);
  for (int64_t i = 0; i < kN; ++i) {
    const bool ignored = masked[static_cast<size_t>(i)] == kIgnoreTarget;
    EXPECT_EQ(r.losses.f32()[i], ignored ? 0.0f : all.losses.f32()[i]) << i;
    EXPECT_EQ(r.lse.f32()[i], all.lse.f32()[i]) << i;
    for (int64_t j = 0; j < kV; ++j) ASSERT_EQ(d.f32()[i * kV + j], ignored ? 0.0f : d_all.f32()[i * kV + j]) << i;
  }
  // Sharded: one slot holding the whole vocabulary, joined by finish: the sum of the counted rows' losses.
  Tensor mx = Tensor::empty({kN}, DType::F32, dev, "max"), tl = Tensor::empty({kN}, DType::F32, dev, "target");
  cross_entropy_stats(logits, ids_tensor(dev, masked), 0, kV, mx, tl);
  EXPECT_EQ(tl.f32()[1], 0.0f);
  Tensor lse = Tensor::empty({kN}, DType::F32, dev, "lse"), sum = Tensor::zeros({1}, DType::F32, dev, "sum");
  row_sum_exp(logits, mx, lse);
  cross_entropy_finish(mx, tl, lse, ids_tensor(dev, masked), sum);
  double want = 0;
  for (int64_t i = 0; i < kN; ++i) want += r.losses.f32()[i];
  EXPECT_NEAR(sum.f32()[0], want, 1e-5 * want);
  Tensor ds = Tensor::empty({kN, kV}, DType::F32, dev, "d sharded");
  cross_entropy_backward(logits, ids_tensor(dev, masked), lse, 0.5f, ds, 0);
  for (int64_t j = 0; j < kV; ++j) EXPECT_EQ(ds.f32()[4 * kV + j], 0.0f);
  // Other negative targets are still refused.
  masked[2] = -1;
  EXPECT_THROW(forward(dev, logits, ids_tensor(dev, masked)), Error);
}

class OpsCrossEntropyDtypes : public ::testing::TestWithParam<DType> {};

// Logits and dlogits in the compute dtype; losses, lse and the sharded statistics f32. The f32 results are formed
// from exact logits in fp32 and keep the fp32 bounds; dlogits is rounded once.
TEST_P(OpsCrossEntropyDtypes, ForwardAndBackwardMatchDoubleOnRoundedInputs) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  Tensor logits = randn_as(dev, {kN, kV}, 2, dt, 3.0f);  // (N, V)
  Tensor targets = ids_tensor(dev, kTargets);            // (N)
  const Outputs r = forward(dev, logits, targets);
  std::vector<double> want_lse;
  EXPECT_LT(rel_error(values(r.losses), reference(values(logits), &want_lse)), 1e-6);
  EXPECT_LT(rel_error(values(r.lse), want_lse), 1e-6);

  const std::vector<double> w(kN, 1.0 / kN);
  const auto want = numeric_grad([](const auto& x) { return reference(x); }, values(logits), w);
  Tensor dlogits = Tensor::empty({kN, kV}, dt, dev, "dlogits");  // (N, V)
  cross_entropy_backward(logits, targets, r.lse, 1.0f / kN, dlogits);
  EXPECT_LT(rel_error(values(dlogits), want), tolerance(dt, 1e-5));
  // In place: the gradient overwrites the logits and must come out the same.
  cross_entropy_backward(logits, targets, r.lse, 1.0f / kN, logits);
  EXPECT_TRUE(testing::bit_equal(logits, dlogits));
}

// Two vocabulary slots of 5 and 6 columns: stats, row_sum_exp summed over slots into lse, then finish, give the
// unsharded loss.
TEST_P(OpsCrossEntropyDtypes, ShardedStatisticsFinishToTheFullLoss) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t widths[2] = {5, 6}, starts[2] = {0, 5};
  Tensor logits = randn_as(dev, {kN, kV}, 30, dt, 3.0f);  // (N, V)
  Tensor targets = ids_tensor(dev, kTargets);
  const auto full = values(logits);
  Tensor slot_logits[2];  // (N, V_local) each
  for (int s = 0; s < 2; ++s) {
    std::vector<double> part;
    for (int64_t i = 0; i < kN; ++i)
      for (int64_t j = 0; j < widths[s]; ++j) part.push_back(full[i * kV + starts[s] + j]);
    slot_logits[s] = testing::from_double_as(dev, {kN, widths[s]}, part, dt);
  }
  Tensor row_max = Tensor::empty({kN}, DType::F32, dev, "row max");
  Tensor target_logit = Tensor::zeros({kN}, DType::F32, dev, "target logit");
  std::vector<double> joined_max(kN, -1e30);
  for (int s = 0; s < 2; ++s) {
    Tensor mx = Tensor::empty({kN}, DType::F32, dev, "slot max");
    Tensor tl = Tensor::empty({kN}, DType::F32, dev, "slot target");
    cross_entropy_stats(slot_logits[s], targets, starts[s], kV, mx, tl);
    for (int64_t i = 0; i < kN; ++i) joined_max[i] = std::max(joined_max[i], double(mx.f32()[i]));
    add(target_logit, tl, target_logit);
  }
  for (int64_t i = 0; i < kN; ++i) row_max.f32()[i] = static_cast<float>(joined_max[i]);
  Tensor lse = Tensor::zeros({kN}, DType::F32, dev, "lse");  // the summed sum_exp, then the lse
  for (int s = 0; s < 2; ++s) {
    Tensor se = Tensor::empty({kN}, DType::F32, dev, "sum exp");
    row_sum_exp(slot_logits[s], row_max, se);
    add(lse, se, lse);
  }
  Tensor loss_sum = Tensor::zeros({1}, DType::F32, dev, "loss sum");
  cross_entropy_finish(row_max, target_logit, lse, targets, loss_sum);
  std::vector<double> want_lse;
  const auto losses = reference(full, &want_lse);
  double want_sum = 0;
  for (double l : losses) want_sum += l;
  EXPECT_LT(rel_error(values(lse), want_lse), 1e-6);
  EXPECT_NEAR(loss_sum.f32()[0], want_sum, 1e-6 * want_sum);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsCrossEntropyDtypes, ::testing::ValuesIn(testing::compute_dtypes()),
                         testing::dtype_label);

TEST(OpsCrossEntropy, RefusedDtypesThrow) {
  device::CpuDevice dev;
  const DType bf = DType::BF16;
  Tensor logits = randn_as(dev, {kN, kV}, 5, bf);
  Tensor targets = ids_tensor(dev, kTargets);
  Tensor f32_n = Tensor::empty({kN}, DType::F32, dev, "f32"), bf_n = Tensor::empty({kN}, bf, dev, "bf16");
  cross_entropy_forward(logits, targets, f32_n, Tensor::empty({kN}, DType::F32, dev, "lse"));  // accepted
  EXPECT_THROW(cross_entropy_forward(logits, targets, bf_n, f32_n), Error);
  EXPECT_THROW(cross_entropy_forward(logits, targets, f32_n, bf_n), Error);
  EXPECT_THROW(cross_entropy_forward(logits, logits.view({kN * kV}).flat_slice(0, kN, {kN}), f32_n, f32_n), Error);
  EXPECT_THROW(cross_entropy_stats(logits, targets, 0, kV, f32_n, bf_n), Error);
  EXPECT_THROW(row_sum_exp(logits, bf_n, f32_n), Error);
  try {
    cross_entropy_backward(logits, targets, f32_n, 1.0f, Tensor::empty({kN, kV}, DType::F16, dev, "dlogits"));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part : {"cross_entropy_backward", "dlogits", "f16", "bf16"})
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tandem::ops
