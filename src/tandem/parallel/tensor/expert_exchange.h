// The exchanges of expert-parallel layers (nn::ExpertExchange), done on the expert-parallel group's communicator.
#pragma once

#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/nn/expert_parallel.h"

namespace tandem::parallel {

class CommExpertExchange final : public nn::ExpertExchange {
 public:
  explicit CommExpertExchange(comm::Communicator& ep) : ep_(ep) {}
  void gather(const Tensor& mine, const Tensor& all) override { ep_.all_gather(mine, all); }
  void rows(const Tensor& in, const std::vector<int64_t>& send, const Tensor& out,
            const std::vector<int64_t>& recv) override {
    const int64_t width = in.dim(-1);  // C: elements of a row, in and out both (rows, C)
    std::vector<int64_t> send_n(send), recv_n(recv);
    for (int64_t& n : send_n) n *= width;
    for (int64_t& n : recv_n) n *= width;
    ep_.all_to_all_v(in, send_n, out, recv_n);
  }

 private:
  comm::Communicator& ep_;
};

}  // namespace tandem::parallel
