// The op profile on the CPU backend: calls, work and time land in the op's row (matmul per shape and dtype), steps
// are averaged after the warm-up, the table adds up, and profiling changes no result.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ops_test_util.h"
#include "tandem/ops/ops.h"
#include "tandem/ops/profile.h"

namespace tandem::ops {
namespace {

using testing::randn;

// Profiling on for one test, off and forgotten after it.
class OpsProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    profile::reset();
    profile::set_enabled(true);
  }
  void TearDown() override {
    profile::set_enabled(false);
    profile::reset();
  }
};

const profile::Row* find(const profile::Summary& s, const std::string& op, const std::string& detail = "") {
  for (const profile::Row& r : s.ops)
    if (r.op == op && r.detail == detail) return &r;
  return nullptr;
}

TEST_F(OpsProfile, RowsHoldCallsWorkAndTime) {
  device::CpuDevice dev;
  Tensor a = randn(dev, {64, 32}, 1), b = randn(dev, {48, 32}, 2);  // (M, K), (N, K)
  Tensor c = Tensor::empty({64, 48}, DType::F32, dev, "c");         // (M, N)
  Tensor x = randn(dev, {1000}, 3), y = randn(dev, {1000}, 4);
  for (int step = 0; step < 4; ++step) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 3; ++i) matmul(a, b, c, false, true);
    matmul(c, b, a, false, false);  // (64, 48) @ (48, 32)
    add(x, y, x);
    add(x, y, x);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // time no op accounts for
    profile::end_step(start);
  }
  const profile::Summary s = profile::summary();
  EXPECT_EQ(s.steps_run, 4);
  EXPECT_EQ(s.first, 2);  // the first two steps warm up
  EXPECT_EQ(s.steps, 2);
  const profile::Row* mm = find(s, "matmul");
  const profile::Row* nt = find(s, "matmul", "64x48x32 nt f32->f32");
  const profile::Row* nn = find(s, "matmul", "64x32x48 nn f32->f32");
  const profile::Row* ad = find(s, "add");
  ASSERT_TRUE(mm && nt && nn && ad);
  EXPECT_DOUBLE_EQ(mm->calls, 4);  // per step
  EXPECT_DOUBLE_EQ(nt->calls, 3);
  EXPECT_DOUBLE_EQ(nn->calls, 1);
  EXPECT_DOUBLE_EQ(nt->flops, 3 * 2.0 * 64 * 48 * 32);  // FLOPs as the counting backend counts them
  EXPECT_DOUBLE_EQ(mm->flops, nt->flops + nn->flops);
  EXPECT_DOUBLE_EQ(ad->calls, 2);
  EXPECT_DOUBLE_EQ(ad->bytes, 2 * 3 * 1000 * 4.0);  // a, b and out of each add
  EXPECT_GT(nt->ms, 0);
  EXPECT_DOUBLE_EQ(mm->ms, nt->ms + nn->ms);
  EXPECT_DOUBLE_EQ(s.op_ms(), mm->ms + ad->ms);
  EXPECT_GT(s.step_ms, s.op_ms() + 1.5);  // the sleep is outside every op
  // The op rows come largest first, each op's shape rows right after it.
  for (size_t i = 0; i + 1 < s.ops.size(); ++i) {
    if (!s.ops[i].detail.empty() && !s.ops[i + 1].detail.empty()) {
      EXPECT_GE(s.ops[i].ms, s.ops[i + 1].ms);
    }
  }
  const std::string t = profile::table(s, "rank 0");
  EXPECT_HAS(t, "op profile (rank 0): mean of steps 3-4 of 4");
  EXPECT_HAS(t, "64x48x32 nt f32->f32");
  EXPECT_HAS(t, "TFLOP/s");
  EXPECT_HAS(t, "GB/s");
  EXPECT_HAS(t, "host gaps and sync");
}

TEST_F(OpsProfile, FewStepsAreAllAveragedAndOffRecordsNothing) {
  device::CpuDevice dev;
  Tensor x = randn(dev, {100}, 1), y = randn(dev, {100}, 2);
  add(x, y, x);
  profile::end_step(std::chrono::steady_clock::now());
  profile::set_enabled(false);
  add(x, y, x);  // not recorded
  profile::set_enabled(true);
  add(x, y, x);
  profile::end_step(std::chrono::steady_clock::now());
  const profile::Summary s = profile::summary();
  EXPECT_EQ(s.first, 0);
  EXPECT_EQ(s.steps, 2);
  ASSERT_TRUE(find(s, "add"));
  EXPECT_DOUBLE_EQ(find(s, "add")->calls, 1);
  profile::reset();
  EXPECT_EQ(profile::summary().steps_run, 0);
  EXPECT_EQ(profile::table(profile::summary(), "rank 0"), "");
}

TEST_F(OpsProfile, TimedOpsComputeTheSameBitsAndStillThrow) {
  device::CpuDevice dev;
  Tensor a = randn(dev, {17, 23}, 1), b = randn(dev, {23, 9}, 2);
  Tensor timed = Tensor::empty({17, 9}, DType::F32, dev, "timed");
  matmul(a, b, timed, false, false);
  EXPECT_DOUBLE_EQ(sum_squares_total({a, b}), sum_squares(a) + sum_squares(b));
  profile::set_enabled(false);
  Tensor plain = Tensor::empty({17, 9}, DType::F32, dev, "plain");
  matmul(a, b, plain, false, false);
  EXPECT_TRUE(testing::bit_equal(timed, plain));
  profile::set_enabled(true);
  // A backend error passes through the timed table (ids out of range are the CPU backend's own check).
  Tensor ids = testing::ids_tensor(dev, {0, 7});
  Tensor table = randn(dev, {5, 3}, 3), y = Tensor::empty({2, 3}, DType::F32, dev, "y");
  EXPECT_THROW(embedding_forward(ids, table, y), Error);
  add(a, a, a);  // the profile is still usable after the throw
  profile::end_step(std::chrono::steady_clock::now());
  EXPECT_TRUE(find(profile::summary(), "add"));
}

}  // namespace
}  // namespace tandem::ops
