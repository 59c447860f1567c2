// The collectives that context parallelism asks for (nn::ContextExchange): attention's all-to-all, the balance
// sums' all-reduce, FP8's amax maximum and ring attention's passes to the next shard, done on the cp group's
// communicator.
#pragma once

#include <memory>
#include <utility>

#include "tandem/comm/communicator.h"
#include "tandem/nn/context_split.h"

namespace tandem::parallel {

class CommContextExchange final : public nn::ContextExchange {
 public:
  explicit CommContextExchange(comm::Communicator& cp) : cp_(cp) {}
  void all_to_all(const Tensor& in, const Tensor& out) override { cp_.all_to_all(in, out); }
  void sum(const Tensor& x) override { cp_.all_reduce(x, comm::ReduceOp::Sum); }
  void max(const Tensor& t) override { cp_.all_reduce(t, comm::ReduceOp::Max); }
  std::unique_ptr<Pass> pass(const Tensor& send, const Tensor& recv, int channel) override {
    const int n = cp_.size(), r = cp_.rank();
    auto received = cp_.recv_async(recv, (r + n - 1) % n, channel);  // posted first: the sender finds it waiting
    auto sent = cp_.send_async(send, (r + 1) % n, channel);
    return std::make_unique<RingPass>(std::move(sent), std::move(received));
  }

 private:
  class RingPass final : public Pass {
   public:
    RingPass(std::unique_ptr<comm::Request> sent, std::unique_ptr<comm::Request> received)
        : sent_(std::move(sent)), received_(std::move(received)) {}
    void wait() override {
      received_->wait();
      sent_->wait();
    }

   private:
    std::unique_ptr<comm::Request> sent_, received_;
  };
  comm::Communicator& cp_;
};

}  // namespace tandem::parallel
