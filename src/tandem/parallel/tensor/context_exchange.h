// The collectives that context parallelism asks for (nn::ContextExchange): attention's all-to-all, the balance
// sums' all-reduce and FP8's amax maximum, done on the cp group's communicator.
#pragma once

#include "tandem/comm/communicator.h"
#include "tandem/nn/context_split.h"

namespace tandem::parallel {

class CommContextExchange final : public nn::ContextExchange {
 public:
  explicit CommContextExchange(comm::Communicator& cp) : cp_(cp) {}
  void all_to_all(const Tensor& in, const Tensor& out) override { cp_.all_to_all(in, out); }
  void sum(const Tensor& x) override { cp_.all_reduce(x, comm::ReduceOp::Sum); }
  void max(const Tensor& t) override { cp_.all_reduce(t, comm::ReduceOp::Max); }

 private:
  comm::Communicator& cp_;
};

}  // namespace tandem::parallel
