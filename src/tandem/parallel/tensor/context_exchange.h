// The all-to-all that context-parallel attention asks for (nn::ContextExchange), done on the cp group's communicator.
#pragma once

#include "tandem/comm/communicator.h"
#include "tandem/nn/context_split.h"

namespace tandem::parallel {

class CommContextExchange final : public nn::ContextExchange {
 public:
  explicit CommContextExchange(comm::Communicator& cp) : cp_(cp) {}
  void all_to_all(const Tensor& in, const Tensor& out) override { cp_.all_to_all(in, out); }

 private:
  comm::Communicator& cp_;
};

}  // namespace tandem::parallel
