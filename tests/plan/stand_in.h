// Stand-in communicators for memory tests: one process plays one rank of a multi-device layout. Collectives
// move only this rank's own bytes (a reduce-scatter keeps its slice, an all-gather repeats its shard, a receive
// gives zeros), so the numbers trained are meaningless, but every tensor the engine allocates is the one the
// real run allocates: the communicators never allocate through the device, here or under MPI.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/layout/groups.h"

namespace tandem::testing {

class StandInCommunicator final : public comm::Communicator {
 public:
  StandInCommunicator(std::string name, int rank, int size) : name_(std::move(name)), rank_(rank), size_(size) {
    for (int i = 0; i < size; ++i) ranks_.push_back(i);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  std::unique_ptr<comm::Request> all_reduce_async(const Tensor&, comm::ReduceOp) override { return done(); }
  std::unique_ptr<comm::Request> reduce_scatter_async(const Tensor& in, const Tensor& out, comm::ReduceOp) override {
    out.copy_from(in.flat_slice(rank_ * out.numel(), out.numel(), out.shape()));
    return done();
  }
  std::unique_ptr<comm::Request> all_gather_async(const Tensor& in, const Tensor& out) override {
    for (int i = 0; i < size_; ++i) {
      const Tensor slot = out.flat_slice(i * in.numel(), in.numel(), in.shape());
      if (slot.raw() != in.raw()) slot.copy_from(in);
    }
    return done();
  }
  std::unique_ptr<comm::Request> broadcast_async(const Tensor&, int) override { return done(); }
  std::unique_ptr<comm::Request> send_async(const Tensor&, int, int) override { return done(); }
  std::unique_ptr<comm::Request> recv_async(const Tensor& t, int, int) override {
    t.fill_zero();
    return done();
  }
  void barrier() override {}
  double all_reduce_scalar(double value, comm::ReduceOp) override { return value; }

 private:
  struct Done final : comm::Request {
    void wait() override {}
  };
  static std::unique_ptr<comm::Request> done() { return std::make_unique<Done>(); }
  std::string name_;
  int rank_, size_;
  std::vector<int> ranks_;
};

// Rank `rank`'s groups in `layout`, every one a stand-in.
inline layout::Groups stand_in_groups(const layout::Layout& l, int rank) {
  layout::Groups g;
  g.layout = l;
  g.coord = layout::coord_of(l, rank);
  g.rank = rank;
  g.world = std::make_unique<StandInCommunicator>("world", rank, l.world());
  g.dp = std::make_unique<StandInCommunicator>("dp", g.coord.dp, l.dp);
  g.pp = std::make_unique<StandInCommunicator>("pp", g.coord.pp, l.pp);
  g.tp = std::make_unique<StandInCommunicator>("tp", g.coord.tp, l.tp);
  return g;
}

}  // namespace tandem::testing
