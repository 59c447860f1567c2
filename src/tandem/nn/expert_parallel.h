// Expert parallelism as seen by a layer: which expert slot of how many it is, and the exchanges that move a mixture of
// experts' routed rows between the slots (nn/moe.h). Layers say what moves; tandem/parallel supplies how (the
// expert-parallel group's communicator). Size 1: every expert is here and nothing moves.
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::nn {

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  // all (size * n) = every slot's `mine` (n), in slot order.
  virtual void gather(const Tensor& mine, const Tensor& all) = 0;
  // Rows of `in` (.., C) to every slot, send[j] rows for slot j back to back; `out` (.., C) gets recv[j] rows from
  // slot j, back to back in slot order.
  virtual void rows(const Tensor& in, const std::vector<int64_t>& send, const Tensor& out,
                    const std::vector<int64_t>& recv) = 0;
};

struct ExpertSlot {
  int rank = 0;
  int size = 1;
  ExpertExchange* exchange = nullptr;  // required when size > 1

  bool active() const { return size > 1; }
};

}  // namespace tandem::nn
