// Communicator: the collectives and point-to-point operations of one group of ranks, on tensors.
// Implementations: SelfCommunicator (a group of one), mpi/ (CPU tensors over Open MPI); NCCL later.
// Every operation on a group carries the group's next sequence number, so a hang can be named.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::comm {

enum class ReduceOp { Sum, Max };

// A started non-blocking operation. wait() blocks (under the watchdog) until it is complete.
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // e.g. "tp(dp=0,pp=1)": the axis and the coordinates the members share.
  virtual const std::string& name() const = 0;
  // World ranks of the members, by group rank.
  virtual const std::vector<int>& world_ranks() const = 0;

  // t = op over the group of t (same shape on every rank).
  virtual std::unique_ptr<Request> all_reduce_async(const Tensor& t, ReduceOp op) = 0;
  // out (n) = op over the group of in's slice [rank*n, (rank+1)*n); in is (size*n).
  virtual std::unique_ptr<Request> reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  // out (size*n) = the concatenation of every rank's in (n). `in` may be out's own slice [rank*n, (rank+1)*n).
  virtual std::unique_ptr<Request> all_gather_async(const Tensor& in, const Tensor& out) = 0;
  virtual std::unique_ptr<Request> broadcast_async(const Tensor& t, int root) = 0;
  // out (size*n): its slice j is rank j's in slice [rank*n, (rank+1)*n) of in (size*n), the personalised exchange
  // (MPI_Alltoall). in and out are distinct.
  virtual std::unique_ptr<Request> all_to_all_async(const Tensor& in, const Tensor& out) = 0;
  // The uneven form (MPI_Alltoallv): `in` holds the slices for ranks 0, 1, ... back to back, send[j] elements for rank
  // j; `out` gets the slices from ranks 0, 1, ... back to back, recv[j] elements from rank j (which rank j gives as
  // its send[rank]). Both lists have size() entries; in and out are distinct. By default made of send_async and
  // recv_async on channel 0 (empty slices skipped, this rank's own copied); a backend whose point-to-point operations
  // must be grouped to run together overrides it.
  virtual std::unique_ptr<Request> all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send,
                                                      const Tensor& out, const std::vector<int64_t>& recv);
  // Point-to-point: `tag & 1` names a channel; messages between two ranks keep their order per channel.
  virtual std::unique_ptr<Request> send_async(const Tensor& t, int peer, int tag) = 0;
  virtual std::unique_ptr<Request> recv_async(const Tensor& t, int peer, int tag) = 0;
  virtual void barrier() = 0;

  // Blocking forms.
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) { all_reduce_async(t, op)->wait(); }
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_async(in, out, op)->wait();
  }
  void all_gather(const Tensor& in, const Tensor& out) { all_gather_async(in, out)->wait(); }
  void broadcast(const Tensor& t, int root) { broadcast_async(t, root)->wait(); }
  void all_to_all(const Tensor& in, const Tensor& out) { all_to_all_async(in, out)->wait(); }
  void all_to_all_v(const Tensor& in, const std::vector<int64_t>& send, const Tensor& out,
                    const std::vector<int64_t>& recv) {
    all_to_all_v_async(in, send, out, recv)->wait();
  }
  void send(const Tensor& t, int peer, int tag) { send_async(t, peer, tag)->wait(); }
  void recv(const Tensor& t, int peer, int tag) { recv_async(t, peer, tag)->wait(); }

  // Reduces one double over the group (losses, norms), in double precision.
  virtual double all_reduce_scalar(double value, ReduceOp op = ReduceOp::Sum) = 0;
};

// A group of one rank: every collective is the identity, point-to-point is an error.
class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name = "self", int world_rank = 0);
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  std::unique_ptr<Request> all_reduce_async(const Tensor& t, ReduceOp op) override;
  std::unique_ptr<Request> reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override;
  std::unique_ptr<Request> all_gather_async(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<Request> broadcast_async(const Tensor& t, int root) override;
  std::unique_ptr<Request> all_to_all_async(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<Request> send_async(const Tensor& t, int peer, int tag) override;
  std::unique_ptr<Request> recv_async(const Tensor& t, int peer, int tag) override;
  void barrier() override {}
  double all_reduce_scalar(double value, ReduceOp) override { return value; }

 private:
  std::string name_;
  std::vector<int> world_ranks_;
};

}  // namespace tandem::comm
