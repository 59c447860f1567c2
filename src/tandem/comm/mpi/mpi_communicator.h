// MpiCommunicator: the Communicator of one MPI group, on host (CPU) tensors. Every operation is started
// non-blocking and waited on under the watchdog: past the timeout it aborts the job with a message that
// names this rank, the operation, its sequence number, the group and the members that have not arrived; a
// member on this host whose process has exited is noticed within about a second and named at once.
#pragma once

#include <mpi.h>

#include "tandem/comm/communicator.h"

namespace tandem::comm::mpi {

class MpiWorld;

// Throws Error naming the MPI call, the group and MPI's text for `code` when code != MPI_SUCCESS.
void check_mpi(int code, const char* call, const std::string& group);

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MpiWorld& world, MPI_Comm comm, std::string name);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }

  std::unique_ptr<Request> all_reduce_async(const Tensor& t, ReduceOp op) override;
  std::unique_ptr<Request> reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override;
  std::unique_ptr<Request> all_gather_async(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<Request> broadcast_async(const Tensor& t, int root) override;
  std::unique_ptr<Request> all_to_all_async(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<Request> send_async(const Tensor& t, int peer, int tag) override;
  std::unique_ptr<Request> recv_async(const Tensor& t, int peer, int tag) override;
  void barrier() override;
  double all_reduce_scalar(double value, ReduceOp op) override;

  // Waits for `req` under the watchdog; `op`/`seq` (the tag for point-to-point) and `peer` (group rank of
  // the other side of a send/recv, -1 for collectives) describe it for the message.
  void wait(MPI_Request& req, int32_t op, int64_t seq, int peer = -1);

 private:
  int64_t begin(int32_t op);  // records the operation in the progress table, returns its sequence number
  std::unique_ptr<Request> started(MPI_Request req, int32_t op, int64_t seq, int peer = -1);
  [[noreturn]] void fire(int32_t op, int64_t seq, int peer, double waited_s);
  // World ranks of the members this wait depends on (the peer of a send/recv, else every other member) whose
  // process has exited; only members on this host can be seen.
  std::vector<int> dead_members(int32_t op, int peer) const;

  MpiWorld& world_;
  MPI_Comm comm_;
  std::string name_;
  uint64_t id_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  int64_t seq_ = 0;
};

}  // namespace tandem::comm::mpi
