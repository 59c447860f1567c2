// Groups under mpirun with 8 processes: make_groups gives each rank the tp, pp and dp communicators of
// docs/architecture.md's dp 2 x pp 2 x tp 2 example (members, order, names), and the cp group of a context-parallel
// layout (with its all-to-all), a sum over each group adds
// exactly its members, and every other layout of 8 ranks follows the rank map too. What each rank sees is
// gathered to every rank and checked there, so rank 0 prints the whole table when a check fails and every
// rank reaches the same verdict. Run under mpirun -np 8.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mpi_test_main.h"
#include "tandem/comm/mpi/mpi_communicator.h"
#include "tandem/device/cpu_device.h"
#include "tandem/layout/groups.h"
#include "test_util.h"

namespace tandem::layout {
namespace {

using Table = std::vector<std::vector<int>>;  // one row per world rank

// Every rank's `mine` (the same length on every rank), by world rank.
Table gather(comm::Communicator& world, const std::vector<int>& mine) {
  device::CpuDevice host;
  const int64_t n = static_cast<int64_t>(mine.size());
  const Tensor in = Tensor::empty({n}, DType::F32, host, "this rank's values");
  const Tensor out = Tensor::empty({n * world.size()}, DType::F32, host, "every rank's values");
  for (int64_t i = 0; i < n; ++i) in.f32()[i] = static_cast<float>(mine[static_cast<size_t>(i)]);
  world.all_gather(in, out);
  Table table(static_cast<size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r)
    for (int64_t i = 0; i < n; ++i) table[r].push_back(static_cast<int>(out.f32()[r * n + i]));
  return table;
}

// docs/architecture.md, 8 devices as dp 2 x pp 2 x tp 2.
const std::vector<int> kVgpu = {0, 0, 0, 0, 1, 1, 1, 1}, kStage = {0, 0, 1, 1, 0, 0, 1, 1},
                       kSlot = {0, 1, 0, 1, 0, 1, 0, 1};
const Table kTpGroups = {{0, 1}, {0, 1}, {2, 3}, {2, 3}, {4, 5}, {4, 5}, {6, 7}, {6, 7}};
const Table kPpGroups = {{0, 2}, {1, 3}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {4, 6}, {5, 7}};
const Table kDpGroups = {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}};

TEST(Groups, EightRanksAsDocumented) {
  comm::mpi::MpiWorld& world = testing::mpi_world();
  const Groups g = make_groups(world, Layout{2, 2, 2});
  const int r = world.rank();
  EXPECT_EQ(g.rank, r);
  EXPECT_EQ(g.layout.str(), "dp 2 x pp 2 x tp 2");
  EXPECT_EQ(g.world->world_ranks(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));

  EXPECT_EQ(gather(*g.world, g.tp->world_ranks()), kTpGroups);
  EXPECT_EQ(gather(*g.world, g.pp->world_ranks()), kPpGroups);
  EXPECT_EQ(gather(*g.world, g.dp->world_ranks()), kDpGroups);

  // Each rank's coordinates, and its rank inside its tp, pp and dp groups: the coordinate along that axis.
  Table coords;
  for (int i = 0; i < 8; ++i) coords.push_back({kVgpu[i], kStage[i], kSlot[i]});
  EXPECT_EQ(gather(*g.world, {g.coord.dp, g.coord.pp, g.coord.tp}), coords);
  EXPECT_EQ(gather(*g.world, {g.dp->rank(), g.pp->rank(), g.tp->rank()}), coords);
  EXPECT_EQ(gather(*g.world, {g.dp->size(), g.pp->size(), g.tp->size(), g.world->size()}),
            Table(8, std::vector<int>{2, 2, 2, 8}));

  // The names the watchdog prints: the axis and the coordinates the members share.
  const std::string d = std::to_string(kVgpu[r]), p = std::to_string(kStage[r]), t = std::to_string(kSlot[r]);
  const bool names_right = g.tp->name() == "tp(dp=" + d + ",pp=" + p + ")" &&
                           g.pp->name() == "pp(dp=" + d + ",tp=" + t + ")" &&
                           g.dp->name() == "dp(pp=" + p + ",tp=" + t + ")" && g.world->name() == "world";
  EXPECT_EQ(gather(*g.world, {names_right ? 1 : 0}), Table(8, std::vector<int>{1}))
      << "rows of 0: ranks whose group names differ; rank " << r << " has " << g.tp->name() << ", " << g.pp->name()
      << ", " << g.dp->name();
}

// dp 2 x pp 1 x tp 2 x cp 2 (rank = tp + 2 (cp + 2 dp)): the cp group holds the ranks that differ only in their
// context shard; dp spans the 4 replicas of a tp slot (dp x cp, ordered by dp * cp + cp); and an all-to-all over cp
// and over the world gives slice j of rank j's values meant for this rank.
TEST(Groups, ContextShardsFormTheirGroupAndExchangeByAllToAll) {
  comm::mpi::MpiWorld& world = testing::mpi_world();
  const Groups g = make_groups(world, Layout{2, 1, 2, 2});
  const int r = world.rank();
  EXPECT_EQ(g.layout.str(), "dp 2 x pp 1 x tp 2 x cp 2");
  EXPECT_EQ(gather(*g.world, g.cp->world_ranks()),
            (Table{{0, 2}, {1, 3}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {4, 6}, {5, 7}}));
  EXPECT_EQ(gather(*g.world, g.dp->world_ranks()), (Table{{0, 2, 4, 6},
                                                          {1, 3, 5, 7},
                                                          {0, 2, 4, 6},
                                                          {1, 3, 5, 7},
                                                          {0, 2, 4, 6},
                                                          {1, 3, 5, 7},
                                                          {0, 2, 4, 6},
                                                          {1, 3, 5, 7}}));
  EXPECT_EQ(gather(*g.world, g.tp->world_ranks()), kTpGroups);
  EXPECT_EQ(gather(*g.world, {g.coord.cp, g.cp->rank(), g.dp->rank()}),
            (Table{{0, 0, 0}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, {0, 0, 2}, {0, 0, 2}, {1, 1, 3}, {1, 1, 3}}));
  EXPECT_EQ(g.cp->name(), "cp(dp=" + std::to_string(r / 4) + ",pp=0,tp=" + std::to_string(r % 2) + ")");
  // Two values for each member j: 1000 * (sender's world rank) + 10 * j + k.
  device::CpuDevice host;
  for (comm::Communicator* group : {g.cp.get(), g.world.get()}) {
    const int n = group->size();
    const Tensor in = Tensor::empty({2 * n}, DType::F32, host, "to each member");
    const Tensor out = Tensor::empty({2 * n}, DType::F32, host, "from each member");
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < 2; ++k) in.f32()[2 * j + k] = static_cast<float>(1000 * r + 10 * j + k);
    group->all_to_all(in, out);
    int wrong = 0;
    const std::vector<int> members = group->world_ranks();
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < 2; ++k)
        wrong +=
            out.f32()[2 * j + k] != static_cast<float>(1000 * members[static_cast<size_t>(j)] + 10 * group->rank() + k);
    EXPECT_EQ(gather(*g.world, {wrong}), Table(8, std::vector<int>{0})) << group->name();
  }
}

// Per rank: the sum of the world ranks over the group by a tensor all-reduce (two elements: rank and
// 100 + rank), by the scalar all-reduce, and the scalar maximum.
std::vector<int> reduce_rank_over(comm::Communicator& group, int rank) {
  device::CpuDevice host;
  const Tensor x = Tensor::empty({2}, DType::F32, host, "rank");
  x.f32()[0] = static_cast<float>(rank);
  x.f32()[1] = static_cast<float>(100 + rank);
  group.all_reduce(x);
  return {static_cast<int>(x.f32()[0]), static_cast<int>(x.f32()[1]), static_cast<int>(group.all_reduce_scalar(rank)),
          static_cast<int>(group.all_reduce_scalar(rank, comm::ReduceOp::Max))};
}

TEST(Groups, AllReduceOverEachGroupSumsItsMembers) {
  comm::mpi::MpiWorld& world = testing::mpi_world();
  const Groups g = make_groups(world, Layout{2, 2, 2});
  const int r = world.rank();
  // Sums of the documented groups: tp {0,1} 1, {2,3} 5, {4,5} 9, {6,7} 13; pp {0,2} 2, {1,3} 4, {4,6} 10,
  // {5,7} 12; dp {0,4} 4, {1,5} 6, {2,6} 8, {3,7} 10. The second element adds 100 per member.
  const auto expected = [](const std::vector<int>& sums, const std::vector<int>& maxima, int members) {
    Table t;
    for (size_t i = 0; i < sums.size(); ++i) t.push_back({sums[i], sums[i] + 100 * members, sums[i], maxima[i]});
    return t;
  };
  EXPECT_EQ(gather(*g.world, reduce_rank_over(*g.tp, r)),
            expected({1, 1, 5, 5, 9, 9, 13, 13}, {1, 1, 3, 3, 5, 5, 7, 7}, 2));
  EXPECT_EQ(gather(*g.world, reduce_rank_over(*g.pp, r)),
            expected({2, 4, 2, 4, 10, 12, 10, 12}, {2, 3, 2, 3, 6, 7, 6, 7}, 2));
  EXPECT_EQ(gather(*g.world, reduce_rank_over(*g.dp, r)),
            expected({4, 6, 8, 10, 4, 6, 8, 10}, {4, 5, 6, 7, 4, 5, 6, 7}, 2));
  EXPECT_EQ(gather(*g.world, reduce_rank_over(*g.world, r)),
            expected({28, 28, 28, 28, 28, 28, 28, 28}, {7, 7, 7, 7, 7, 7, 7, 7}, 8));
}

// Every (dp, pp, tp) of 8 ranks: each group's members are the ranks that share the other two coordinates,
// ordered along the axis (rank = tp_rank + tp * (pp_rank + pp * dp_rank)). Only the world group communicates
// here: a process records its progress on at most ProgressTable::kMaxGroups named groups, fewer than the
// groups of ten layouts; the sums are checked on the documented layout above.
TEST(Groups, EveryLayoutOfEightRanksFollowsTheRankMap) {
  comm::mpi::MpiWorld& world = testing::mpi_world();
  int layouts = 0;
  for (int dp = 1; dp <= 8; dp *= 2)
    for (int pp = 1; dp * pp <= 8; pp *= 2) {
      const Layout l{dp, pp, 8 / (dp * pp)};
      ++layouts;
      const Groups g = make_groups(world, l);
      const Coord c = g.coord;
      std::vector<int> tp_members, pp_members, dp_members;
      for (int t = 0; t < l.tp; ++t) tp_members.push_back(t + l.tp * (c.pp + l.pp * c.dp));
      for (int p = 0; p < l.pp; ++p) pp_members.push_back(c.tp + l.tp * (p + l.pp * c.dp));
      for (int d = 0; d < l.dp; ++d) dp_members.push_back(c.tp + l.tp * (c.pp + l.pp * d));
      // A bit per kind of mismatch, so a failure says what went wrong on which rank.
      int wrong = 0;
      wrong |= (g.tp->world_ranks() != tp_members) << 0;
      wrong |= (g.pp->world_ranks() != pp_members) << 1;
      wrong |= (g.dp->world_ranks() != dp_members) << 2;
      wrong |= (g.tp->rank() != c.tp || g.pp->rank() != c.pp || g.dp->rank() != c.dp) << 3;
      wrong |= (g.tp->size() != l.tp || g.pp->size() != l.pp || g.dp->size() != l.dp) << 4;
      wrong |= (tp_members[static_cast<size_t>(c.tp)] != world.rank()) << 5;
      EXPECT_EQ(gather(*g.world, {wrong}), Table(8, std::vector<int>{0}))
          << l.str() << ": per rank, bits 1/2/4 tp/pp/dp members, 8 group ranks, 16 group sizes, 32 the rank map";
    }
  EXPECT_EQ(layouts, 10);
}

TEST(Groups, LayoutOfAnotherWorldSizeIsRefused) {
  comm::mpi::MpiWorld& world = testing::mpi_world();
  EXPECT_HAS(tandem::testing::error_of([&] {
               make_groups(world, Layout{2, 2, 1});
             }),
             "layout dp 2 x pp 2 x tp 1 on 8 ranks");
}

// A communicator whose setup calls fail (here: no communicator at all) is refused with the failing MPI call and the
// group named, not built with a rank and size MPI never gave.
TEST(Groups, ACommunicatorWhoseSetupFailsIsRefusedNamingTheCall) {
  comm::mpi::MpiWorld& world = testing::mpi_world();
  EXPECT_HAS(tandem::testing::error_of([&] { comm::mpi::MpiCommunicator(world, MPI_COMM_NULL, "broken"); }),
             "MPI_Comm_rank failed on group 'broken'");
}

}  // namespace
}  // namespace tandem::layout
