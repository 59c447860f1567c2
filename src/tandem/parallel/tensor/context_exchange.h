// The collectives that context parallelism asks for (nn::ContextExchange): attention's all-to-all, the balance
// sums' all-reduce, FP8's amax maximum and ring attention's passes to the next shard, done on the cp group's
// communicator.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/nn/context_split.h"

namespace tandem::parallel {

class CommContextExchange final : public nn::ContextExchange {
 public:
  explicit CommContextExchange(comm::Communicator& cp) : cp_(cp) {}
  void all_to_all(const Tensor& in, const Tensor& out) override { cp_.all_to_all(in, out); }
  void sum(const Tensor& x) override { cp_.all_reduce(x, comm::ReduceOp::Sum); }
  void max(const Tensor& t) override { cp_.all_reduce(t, comm::ReduceOp::Max); }
  // One uneven all-to-all with a single send and a single receive: a backend that must group its point-to-point
  // operations (NCCL, whose send and receive posted one after the other on one stream would wait on each other around
  // the ring) runs them together.
  std::unique_ptr<Pass> pass(const Tensor& send, const Tensor& recv) override {
    const int n = cp_.size(), r = cp_.rank();
    std::vector<int64_t> sends(static_cast<size_t>(n), 0), recvs(static_cast<size_t>(n), 0);
    sends[static_cast<size_t>((r + 1) % n)] = send.numel();
    recvs[static_cast<size_t>((r + n - 1) % n)] = recv.numel();
    return std::make_unique<RingPass>(
        cp_.all_to_all_v_async(send.view({send.numel()}), sends, recv.view({recv.numel()}), recvs));
  }

 private:
  class RingPass final : public Pass {
   public:
    explicit RingPass(std::unique_ptr<comm::Request> exchange) : exchange_(std::move(exchange)) {}
    void wait() override { exchange_->wait(); }

   private:
    std::unique_ptr<comm::Request> exchange_;
  };
  comm::Communicator& cp_;
};

}  // namespace tandem::parallel
