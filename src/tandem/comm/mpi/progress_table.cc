#include "tandem/comm/mpi/progress_table.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "tandem/comm/mpi/mpi_communicator.h"
#include "tandem/core/error.h"

namespace tandem::comm::mpi {

namespace {
constexpr const char* kGroup = "the progress table of this node";
}  // namespace

const char* op_name(int32_t op) {
  switch (op) {
    case kAllReduce:
      return "all_reduce";
    case kReduceScatter:
      return "reduce_scatter";
    case kAllGather:
      return "all_gather";
    case kBroadcast:
      return "broadcast";
    case kSend:
      return "send";
    case kRecv:
      return "recv";
    case kBarrier:
      return "barrier";
    case kScalar:
      return "all_reduce(scalar)";
    case kAllToAll:
      return "all_to_all";
    default:
      return "nothing";
  }
}

ProgressTable::ProgressTable(MPI_Comm world) {
  int world_rank = 0, world_size = 0;
  check_mpi(MPI_Comm_rank(world, &world_rank), "MPI_Comm_rank", kGroup);
  check_mpi(MPI_Comm_size(world, &world_size), "MPI_Comm_size", kGroup);
  check_mpi(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node_), "MPI_Comm_split_type",
            kGroup);
  int node_size = 0;
  check_mpi(MPI_Comm_size(node_, &node_size), "MPI_Comm_size", kGroup);
  void* base = nullptr;
  check_mpi(MPI_Win_allocate_shared(sizeof(Entry), sizeof(Entry), MPI_INFO_NULL, node_, &base, &win_),
            "MPI_Win_allocate_shared", kGroup);
  mine_ = static_cast<volatile Entry*>(base);
  for (int g = 0; g < kMaxGroups; ++g) {
    mine_->group[g] = 0;
    mine_->started[g] = -1;
  }
  mine_->wait_group = 0;
  mine_->wait_seq = 0;
  mine_->wait_op = kNone;
  mine_->waiting = 0;
  mine_->pid = static_cast<int64_t>(getpid());
  mine_->wait_group_name[0] = 0;

  std::vector<int> node_world(static_cast<size_t>(node_size));
  check_mpi(MPI_Allgather(&world_rank, 1, MPI_INT, node_world.data(), 1, MPI_INT, node_), "MPI_Allgather", kGroup);
  by_world_rank_.assign(static_cast<size_t>(world_size), nullptr);
  for (int r = 0; r < node_size; ++r) {
    MPI_Aint size = 0;
    int disp = 0;
    void* ptr = nullptr;
    check_mpi(MPI_Win_shared_query(win_, r, &size, &disp, &ptr), "MPI_Win_shared_query", kGroup);
    by_world_rank_[static_cast<size_t>(node_world[static_cast<size_t>(r)])] = static_cast<volatile Entry*>(ptr);
  }
  check_mpi(MPI_Barrier(node_), "MPI_Barrier", kGroup);
}

ProgressTable::~ProgressTable() {
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
}

void ProgressTable::started(uint64_t group, int64_t seq) {
  int slot = -1;
  for (int g = 0; g < kMaxGroups && slot < 0; ++g)
    if (mine_->group[g] == group || mine_->group[g] == 0) slot = g;
  TANDEM_CHECK(slot >= 0, "a rank belongs to more than ", kMaxGroups, " communication groups");
  mine_->started[slot] = seq;
  std::atomic_thread_fence(std::memory_order_release);
  mine_->group[slot] = group;
}

void ProgressTable::waiting(uint64_t group, const std::string& group_name, int64_t seq, int32_t op) {
  if (mine_->wait_group != group) {
    const size_t n = std::min(group_name.size(), sizeof(mine_->wait_group_name) - 1);
    for (size_t i = 0; i < n; ++i) mine_->wait_group_name[i] = group_name[i];
    mine_->wait_group_name[n] = 0;
  }
  mine_->wait_group = group;
  mine_->wait_seq = seq;
  mine_->wait_op = op;
  std::atomic_thread_fence(std::memory_order_release);
  mine_->waiting = 1;
}

void ProgressTable::finished_waiting() { mine_->waiting = 0; }

bool ProgressTable::read(int world_rank, uint64_t group, PeerProgress& out) const {
  if (world_rank < 0 || static_cast<size_t>(world_rank) >= by_world_rank_.size()) return false;
  volatile Entry* e = by_world_rank_[static_cast<size_t>(world_rank)];
  if (!e) return false;
  std::atomic_thread_fence(std::memory_order_acquire);
  out = PeerProgress{};
  for (int g = 0; g < kMaxGroups; ++g)
    if (e->group[g] == group) out.started = e->started[g];
  out.wait_group = e->wait_group;
  out.wait_seq = e->wait_seq;
  out.wait_op = e->wait_op;
  out.waiting = e->waiting != 0;
  for (size_t i = 0; i < sizeof(e->wait_group_name) && e->wait_group_name[i]; ++i)
    out.wait_group_name += e->wait_group_name[i];
  // kill(pid, 0) sends nothing; it fails with ESRCH once the process is gone.
  out.alive = !(kill(static_cast<pid_t>(e->pid), 0) != 0 && errno == ESRCH);
  return true;
}

}  // namespace tandem::comm::mpi
