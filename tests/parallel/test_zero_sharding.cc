// ZeroSharding on its own, over a group of two processes and over a group of one: what a rank owns of a unit's padded
// buffer, the gather of a transient unit's values from the ranks' shards, and the reductions of gradients at each
// stage. Run under mpirun -np 2.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpi_test_main.h"
#include "tandem/device/cpu_device.h"
#include "tandem/parallel/zero/zero_sharding.h"

namespace tandem::parallel {
namespace {

std::vector<float> values_of(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  t.copy_to_host(v.data());
  return v;
}

void set(const Tensor& t, const std::vector<float>& v) { t.copy_from_host(v.data()); }

nn::Parameter parameter(std::string name, Shape shape) {
  nn::Parameter p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  return p;
}

// A unit of two parameters, (2) and (3): P_u = 5, shard 3 over two ranks, the padded buffer (6).
struct TwoParameterUnit {
  nn::Parameter a = parameter(std::string("a"), {2}), b = parameter(std::string("b"), {3});
  Unit u;
  explicit TwoParameterUnit(const ZeroSharding& zero) {
    u.params = {&a, &b};
    u.offsets = {0, 2};
    u.numel = 5;
    u.shard = zero.shard_of(u.numel);
    u.label = std::string("unit");
  }
};

class ZeroShardingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world = testing::mpi_world().world();
    ASSERT_EQ(world->size(), 2);
    rank = world->rank();
  }
  device::CpuDevice dev;
  std::unique_ptr<comm::Communicator> world;
  int rank = 0;
};

TEST_F(ZeroShardingTest, EachRankOwnsItsShardOfThePaddedBuffer) {
  const ZeroSharding zero(3, *world, dev, DType::F32, false);
  TwoParameterUnit t(zero);
  EXPECT_EQ(t.u.shard, 3);
  EXPECT_EQ(zero.padded(t.u), 6);
  EXPECT_EQ(zero.owned_begin(t.u), 3 * rank);
  EXPECT_EQ(zero.master_begin(t.u), 3 * rank);
  EXPECT_EQ(zero.master_count(t.u), 3);
  EXPECT_TRUE(zero.values_transient());
  EXPECT_TRUE(zero.grads_transient());
  EXPECT_TRUE(zero.counts_gradients());
  // Stage 0: every rank holds the whole buffer, and rank 0 alone counts the (identical) gradients.
  const ZeroSharding zero0(0, *world, dev, DType::F32, false);
  EXPECT_EQ(zero0.master_begin(t.u), 0);
  EXPECT_EQ(zero0.master_count(t.u), 6);
  EXPECT_FALSE(zero0.values_transient());
  EXPECT_EQ(zero0.counts_gradients(), rank == 0);
  // offload_param: the full values exist only around a use at any stage.
  EXPECT_TRUE(ZeroSharding(1, *world, dev, DType::F32, true).values_transient());
}

TEST_F(ZeroShardingTest, AGroupOfOneShardsNothing) {
  const std::unique_ptr<comm::Communicator> alone = testing::mpi_world().split(rank, 0, "alone");
  const ZeroSharding zero(3, *alone, dev, DType::F32, false);
  EXPECT_EQ(zero.stage(), 0);
  TwoParameterUnit t(zero);
  EXPECT_EQ(t.u.shard, 5);
  EXPECT_EQ(zero.padded(t.u), 5);
}

TEST_F(ZeroShardingTest, GatherFillsTheOwnedShardThenGathersAndPointsTheParameters) {
  ZeroSharding zero(3, *world, dev, DType::F32, false);
  TwoParameterUnit t(zero);
  zero.gather(t.u, [&](const Tensor& own) {
    ASSERT_EQ(own.numel(), 3);
    set(own, {10.0f * rank, 10.0f * rank + 1, 10.0f * rank + 2});
  });
  EXPECT_EQ(values_of(t.u.full_values), (std::vector<float>{0, 1, 2, 10, 11, 12}));
  EXPECT_EQ(values_of(t.a.value), (std::vector<float>{0, 1}));
  EXPECT_EQ(values_of(t.b.value), (std::vector<float>{2, 10, 11}));
  zero.release(t.u);
  EXPECT_FALSE(t.u.full_values.defined());
  EXPECT_FALSE(t.a.value.defined());
}

TEST_F(ZeroShardingTest, ABackwardsGradientIsReduceScatteredIntoTheOwnedShard) {
  ZeroSharding zero(2, *world, dev, DType::F32, false);
  TwoParameterUnit t(zero);
  t.u.owned_grads = Tensor::zeros({3}, DType::F32, dev, "owned");
  set(t.u.owned_grads, {1, 1, 1});
  zero.open_gradients(t.u);
  EXPECT_EQ(values_of(t.b.grad), (std::vector<float>{0, 0, 0}));
  set(t.u.full_grads, {1.0f + rank, 2, 3, 4, 5, 6});
  zero.close_gradients(t.u);
  EXPECT_FALSE(t.u.full_grads.defined());
  EXPECT_FALSE(t.a.grad.defined());
  const std::vector<float> sums{4, 5, 7, 9, 11, 13};  // the reduced sum, plus the 1 already there
  EXPECT_EQ(values_of(t.u.owned_grads), std::vector<float>(sums.begin() + 3 * rank, sums.begin() + 3 * rank + 3));
}

TEST_F(ZeroShardingTest, TheStepsReductionIsAnAllReduceAtStage0AndAReduceScatterAt1) {
  for (const int stage : {0, 1}) {
    ZeroSharding zero(stage, *world, dev, DType::F32, false);
    TwoParameterUnit t(zero);
    t.u.full_grads = Tensor::zeros({6}, DType::F32, dev, "full");
    t.u.owned_grads = Tensor::zeros({3}, DType::F32, dev, "owned");
    set(t.u.full_grads, {1.0f + rank, 2, 3, 4, 5, 6});
    zero.reduce({&t.u});
    const std::vector<float> whole{3, 4, 6, 8, 10, 12};
    const std::vector<float> owned(whole.begin() + 3 * rank, whole.begin() + 3 * rank + 3);
    EXPECT_EQ(values_of(zero.update_grads(t.u)), stage == 0 ? whole : owned) << "stage " << stage;
  }
}

}  // namespace
}  // namespace tandem::parallel
