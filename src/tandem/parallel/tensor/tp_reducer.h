// The reductions tensor-parallel layers ask for (nn::TpReducer), done on the tp group's communicator.
#pragma once

#include "tandem/comm/communicator.h"
#include "tandem/nn/tensor_parallel.h"

namespace tandem::parallel {

class CommTpReducer final : public nn::TpReducer {
 public:
  explicit CommTpReducer(comm::Communicator& tp) : tp_(tp) {}
  void sum(const Tensor& t) override { tp_.all_reduce(t, comm::ReduceOp::Sum); }
  void max(const Tensor& t) override { tp_.all_reduce(t, comm::ReduceOp::Max); }

 private:
  comm::Communicator& tp_;
};

}  // namespace tandem::parallel
