// Token embedding and learned positions: forward against double, backward against finite differences,
// out-of-range ids, determinism of the scatter-add; the 16-bit compute dtypes with f32 gradients; refused dtypes.
#include <gtest/gtest.h>

#include "ops_test_util.h"
#include "tandem/ops/op_util.h"
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
  const int64_t n = 2100, c = 130;
  ASSERT_TRUE(worth_parallel(n * c));  // large enough for the parallel path
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

class OpsEmbeddingDtypes : public ::testing::TestWithParam<DType> {};

// table, y, pos and dy in the compute dtype; dtable and dpos f32. A lookup copies bits (exact); the scatter-add
// and the position gradient sum exact inputs in fp32 and keep the fp32 bounds.
TEST_P(OpsEmbeddingDtypes, ForwardAndBackwardOnRoundedInputs) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7, 7, 1, 5, 3};
  const int64_t n = static_cast<int64_t>(ids.size());
  Tensor table = randn_as(dev, {kV, kC}, 1, dt);       // (V, C)
  Tensor y = Tensor::empty({3, 3, kC}, dt, dev, "y");  // (B, T, C)
  embedding_forward(ids_tensor(dev, ids).view({3, 3}), table, y);
  EXPECT_EQ(values(y), lookup(ids, values(table)));

  Tensor dy = randn_as(dev, {n, kC}, 3, dt);  // (N, C)
  Tensor dtable = randn(dev, {kV, kC}, 4);    // (V, C) f32, nonzero: accumulates
  auto want = numeric_grad([&](const auto& t) { return lookup(ids, t); }, values(table), values(dy));
  const auto dtable0 = values(dtable);
  for (size_t i = 0; i < want.size(); ++i) want[i] += dtable0[i];
  embedding_backward(ids_tensor(dev, ids), dy, dtable);
  EXPECT_LT(rel_error(values(dtable), want), 1e-6);

  // Sharded forward: rows of other slots are zeros in every dtype.
  Tensor part = Tensor::empty({n, kC}, dt, dev, "part");
  embedding_forward(ids_tensor(dev, ids), table.rows(5, 6), part, 5, kV);
  const auto got = values(part), tab = values(table);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < kC; ++j)
      EXPECT_EQ(got[i * kC + j], ids[i] >= 5 ? tab[ids[i] * kC + j] : 0.0) << i << "," << j;
}

TEST_P(OpsEmbeddingDtypes, PositionsForwardAndBackward) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  const int64_t b = 3, t = 5, t_max = 9;
  Tensor y = randn_as(dev, {b, t, kC}, 7, dt);     // (B, T, C)
  Tensor pos = randn_as(dev, {t_max, kC}, 8, dt);  // (T_max, C)
  Tensor dy = randn_as(dev, {b, t, kC}, 9, dt);    // (B, T, C)
  Tensor dpos = randn(dev, {t_max, kC}, 10);       // (T_max, C) f32, nonzero: accumulates
  const auto want_y = with_positions(values(y), values(pos), b, t);
  add_positions(y, pos);
  EXPECT_LT(rel_error(values(y), want_y), tolerance(dt, 1e-6));

  auto want = values(dpos);
  const auto g = values(dy);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < t * kC; ++i) want[i] += g[bi * t * kC + i];
  add_positions_backward(dy, dpos);
  EXPECT_LT(rel_error(values(dpos), want), 1e-6);
}

TEST_P(OpsEmbeddingDtypes, BackwardsAreBitIdenticalAcrossThreadCounts) {
  const DType dt = GetParam();
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  const int64_t n = 2100, c = 130, b = 30, t = 70;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7 + i / 3) % kV);
  Tensor dy = randn_as(dev, {n, c}, 6, dt);
  Tensor dy_pos = dy.view({b, t, c});  // (B, T, C), B*T = N
  Tensor dt_out[2], dpos[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    dt_out[run] = Tensor::zeros({kV, c}, DType::F32, dev, "dtable");
    embedding_backward(ids_tensor(dev, ids), dy, dt_out[run]);
    dpos[run] = Tensor::zeros({t, c}, DType::F32, dev, "dpos");
    add_positions_backward(dy_pos, dpos[run]);
  }
  EXPECT_TRUE(testing::bit_equal(dt_out[0], dt_out[1]));
  EXPECT_TRUE(testing::bit_equal(dpos[0], dpos[1]));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsEmbeddingDtypes, ::testing::ValuesIn(testing::compute_dtypes()),
                         testing::dtype_label);

TEST(OpsEmbedding, RefusedDtypesThrow) {
  device::CpuDevice dev;
  const DType bf = DType::BF16;
  Tensor ids = ids_tensor(dev, {1, 2, 3});
  Tensor table = randn_as(dev, {kV, kC}, 1, bf);
  Tensor y = Tensor::empty({3, kC}, bf, dev, "y");
  embedding_forward(ids, table, y);  // the accepted combination
  EXPECT_THROW(embedding_forward(ids, table, Tensor::empty({3, kC}, DType::F16, dev, "y")), Error);
  EXPECT_THROW(embedding_forward(ids, table, Tensor::empty({3, kC}, DType::F32, dev, "y")), Error);
  EXPECT_THROW(embedding_forward(ids.view({3}), Tensor::zeros({kV, kC}, DType::I32, dev, "t"),
                                 Tensor::empty({3, kC}, DType::I32, dev, "y")),
               Error);
  try {
    embedding_backward(ids, y, Tensor::zeros({kV, kC}, bf, dev, "dtable"));  // dtable must be f32
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part : {"embedding_backward", "dtable", "bf16", "f32"})
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
  Tensor y3 = randn_as(dev, {1, 3, kC}, 2, bf);
  EXPECT_THROW(add_positions(y3, randn(dev, {4, kC}, 3)), Error);
  EXPECT_THROW(add_positions_backward(y3, Tensor::zeros({4, kC}, bf, dev, "dpos")), Error);
}

}  // namespace
}  // namespace tandem::ops
