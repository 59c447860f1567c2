// Token embedding and learned positions: forward against double, backward against finite differences,
// out-of-range ids, determinism of the scatter-add.
#include <gtest/gtest.h>

#include "ops_test_util.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::ids_tensor;
using testing::numeric_grad;
using testing::randn;
using testing::rel_error;
using testing::to_double;

constexpr int64_t kV = 11, kC = 13;

// y (N, C) = table[ids] in double.
std::vector<double> lookup(const std::vector<int32_t>& ids, const std::vector<double>& table) {
  std::vector<double> y;
  for (int32_t id : ids) y.insert(y.end(), table.begin() + id * kC, table.begin() + (id + 1) * kC);
  return y;
}

TEST(OpsEmbedding, ForwardMatchesDouble) {
  device::CpuDevice dev;
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7, 7, 1, 5, 3};  // repeats and both ends of [0, V)
  Tensor table = randn(dev, {kV, kC}, 1);                         // (V, C)
  Tensor y = Tensor::empty({3, 3, kC}, DType::F32, dev, "y");     // (B, T, C)
  embedding_forward(ids_tensor(dev, ids).view({3, 3}), table, y);
  EXPECT_EQ(rel_error(to_double(y), lookup(ids, to_double(table))), 0.0);
}

TEST(OpsEmbedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  device::CpuDevice dev;
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7, 7, 1, 5, 3};
  const int64_t n = static_cast<int64_t>(ids.size());
  Tensor table = randn(dev, {kV, kC}, 2);   // (V, C)
  Tensor dy = randn(dev, {n, kC}, 3);       // (N, C)
  Tensor dtable = randn(dev, {kV, kC}, 4);  // (V, C), nonzero: accumulates
  auto want = numeric_grad([&](const auto& t) { return lookup(ids, t); }, to_double(table), to_double(dy));
  const auto dtable0 = to_double(dtable);
  for (size_t i = 0; i < want.size(); ++i) want[i] += dtable0[i];
  embedding_backward(ids_tensor(dev, ids), dy, dtable);
  EXPECT_LT(rel_error(to_double(dtable), want), 1e-6);
}

TEST(OpsEmbedding, OutOfRangeIdThrowsNamingIt) {
  device::CpuDevice dev;
  Tensor table = randn(dev, {kV, kC}, 5);
  Tensor y = Tensor::empty({3, kC}, DType::F32, dev, "y");
  for (int32_t bad : {11, -1, 12345}) {
    Tensor ids = ids_tensor(dev, {0, bad, 2});
    try {
      embedding_forward(ids, table, y);
      FAIL() << "expected an Error for id " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("id " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("row 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("11"), std::string::npos) << msg;
    }
    Tensor dtable = Tensor::zeros({kV, kC}, DType::F32, dev, "dtable");
    EXPECT_THROW(embedding_backward(ids, y, dtable), Error);
  }
}

TEST(OpsEmbedding, BackwardIsBitIdenticalAcrossThreadCounts) {
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  const int64_t n = 500, c = 130;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7 + i / 3) % kV);  // many repeats per row
  Tensor dy = randn(dev, {n, c}, 6);
  Tensor dt[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    dt[run] = Tensor::zeros({kV, c}, DType::F32, dev, "dtable");
    embedding_backward(ids_tensor(dev, ids), dy, dt[run]);
  }
  EXPECT_TRUE(testing::bit_equal(dt[0], dt[1]));
}

// Tensor parallelism splits the vocabulary: two slots of 6 rows each must together give the unsharded result.
TEST(OpsEmbedding, ShardedSlotsSumToTheFullTable) {
  device::CpuDevice dev;
  const int64_t vocab = 12, half = 6;
  const std::vector<int32_t> ids = {0, 11, 5, 6, 3, 9, 6};
  const int64_t n = static_cast<int64_t>(ids.size());
  Tensor tok = ids_tensor(dev, ids);                              // (N)
  Tensor table = randn(dev, {vocab, kC}, 20);                     // (vocab, C)
  Tensor dy = randn(dev, {n, kC}, 21);                            // (N, C)
  Tensor full = Tensor::empty({n, kC}, DType::F32, dev, "full");  // (N, C)
  embedding_forward(tok, table, full);
  Tensor dfull = Tensor::zeros({vocab, kC}, DType::F32, dev, "dfull");  // (vocab, C)
  embedding_backward(tok, dy, dfull);

  Tensor sum = Tensor::zeros({n, kC}, DType::F32, dev, "sum");  // (N, C)
  for (int64_t slot = 0; slot < 2; ++slot) {
    const int64_t start = slot * half;
    Tensor y = Tensor::empty({n, kC}, DType::F32, dev, "y");  // (N, C)
    embedding_forward(tok, table.rows(start, half), y, start, vocab);
    add(sum, y, sum);
    Tensor dt = Tensor::zeros({half, kC}, DType::F32, dev, "dtable");  // (V_local, C)
    embedding_backward(tok, dy, dt, start);
    EXPECT_TRUE(testing::bit_equal(dt, dfull.rows(start, half))) << "slot " << slot;
  }
  EXPECT_TRUE(testing::bit_equal(sum, full));

  Tensor y = Tensor::empty({n, kC}, DType::F32, dev, "y");
  EXPECT_THROW(embedding_forward(ids_tensor(dev, {0, 12}), table.rows(half, half), y.rows(0, 2), half, vocab), Error);
  Tensor dt = Tensor::zeros({half, kC}, DType::F32, dev, "dtable");
  EXPECT_THROW(embedding_backward(ids_tensor(dev, {0, -1}), dy.rows(0, 2), dt, half), Error);
}

// y (B, T, C) = x + pos[t] in double.
std::vector<double> with_positions(const std::vector<double>& x, const std::vector<double>& pos, int64_t b, int64_t t) {
  std::vector<double> y = x;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t j = 0; j < kC; ++j) y[(bi * t + ti) * kC + j] += pos[ti * kC + j];
  return y;
}

TEST(OpsPositions, ForwardAndBackwardUseOnlyTheFirstTRows) {
  device::CpuDevice dev;
  const int64_t b = 3, t = 5, t_max = 9;
  Tensor y = randn(dev, {b, t, kC}, 7);       // (B, T, C)
  Tensor pos = randn(dev, {t_max, kC}, 8);    // (T_max, C)
  Tensor dy = randn(dev, {b, t, kC}, 9);      // (B, T, C)
  Tensor dpos = randn(dev, {t_max, kC}, 10);  // (T_max, C), nonzero: accumulates
  const auto want_y = with_positions(to_double(y), to_double(pos), b, t);
  add_positions(y, pos);
  EXPECT_LT(rel_error(to_double(y), want_y), 1e-6);

  const auto x0 = to_double(y);
  auto want = numeric_grad([&](const auto& p) { return with_positions(x0, p, b, t); }, to_double(pos), to_double(dy));
  const auto dpos0 = to_double(dpos);
  for (size_t i = 0; i < want.size(); ++i) want[i] += dpos0[i];  // rows t.. get zero gradient: stay as they were
  add_positions_backward(dy, dpos);
  EXPECT_LT(rel_error(to_double(dpos), want), 1e-5);
  for (int64_t i = t * kC; i < t_max * kC; ++i) EXPECT_EQ(dpos.f32()[i], dpos0[i]);
}

TEST(OpsPositions, LongerSequenceThanTableThrows) {
  device::CpuDevice dev;
  EXPECT_THROW(add_positions(randn(dev, {2, 10, kC}, 11), randn(dev, {9, kC}, 12)), Error);
}

}  // namespace
}  // namespace tandem::ops
