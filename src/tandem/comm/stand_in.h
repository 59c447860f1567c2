// StandInCommunicator: one rank playing its part of a group alone, for the planner (which runs one rank of a
// layout on a counting device) and for memory tests. Collectives move only this rank's own bytes (a
// reduce-scatter keeps its slice, an all-gather repeats its shard, a receive gives zeros), so the numbers trained
// are meaningless, but every tensor the engine allocates is the one a real run allocates: communicators never
// allocate through the device. On a counting device every collective and every receive is recorded in the
// device's WorkLog under the group's axis, in bus bytes (device/counting_device.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/device/counting_device.h"

namespace tandem::comm {

class StandInCommunicator final : public Communicator {
 public:
  // `axis` names the group's kind in the WorkLog; `rank` of `size` is the member this process plays.
  StandInCommunicator(std::string name, device::CommAxis axis, int rank, int size);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
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
  // Adds one operation of `bus_bytes` to the WorkLog of `t`'s device when it is a counting device.
  void record(const Tensor& t, double bus_bytes) const;

  std::string name_;
  device::CommAxis axis_;
  int rank_, size_;
  std::vector<int> ranks_;
};

}  // namespace tandem::comm
