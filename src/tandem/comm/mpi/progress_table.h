// ProgressTable: for every rank, the last operation it started on each of its groups and the operation it
// is waiting on now, in memory shared by the ranks of one host (an MPI-3 shared window). Reading a peer's
// entry is a plain load, so the watchdog can say who has not arrived even when that peer is hung or dead.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::comm::mpi {

enum OpCode : int32_t {
  kNone,
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kSend,
  kRecv,
  kBarrier,
  kScalar,
  kAllToAll
};
const char* op_name(int32_t op);

struct PeerProgress {
  int64_t started = -1;  // the peer's last started sequence number on the asked group (-1: none)
  uint64_t wait_group = 0;
  int64_t wait_seq = 0;
  int32_t wait_op = kNone;
  bool waiting = false;
  bool alive = true;  // the peer's process still exists (same host: checked by its pid)
  std::string wait_group_name;
};

class ProgressTable {
 public:
  static constexpr int kMaxGroups = 16;

  explicit ProgressTable(MPI_Comm world);
  ~ProgressTable();
  ProgressTable(const ProgressTable&) = delete;
  ProgressTable& operator=(const ProgressTable&) = delete;

  void started(uint64_t group, int64_t seq);
  void waiting(uint64_t group, const std::string& group_name, int64_t seq, int32_t op);
  void finished_waiting();
  // False for ranks on another host (their progress cannot be read).
  bool read(int world_rank, uint64_t group, PeerProgress& out) const;

 private:
  struct Entry {
    uint64_t group[kMaxGroups];
    int64_t started[kMaxGroups];
    uint64_t wait_group;
    int64_t wait_seq;
    int32_t wait_op;
    int32_t waiting;
    int64_t pid;
    char wait_group_name[64];  // a peer may not belong to that group, so it could not name it otherwise
  };

  MPI_Win win_ = MPI_WIN_NULL;
  MPI_Comm node_ = MPI_COMM_NULL;
  volatile Entry* mine_ = nullptr;
  std::vector<volatile Entry*> by_world_rank_;  // null for ranks on other hosts
};

}  // namespace tandem::comm::mpi
