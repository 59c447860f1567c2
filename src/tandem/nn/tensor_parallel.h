// Tensor parallelism as seen by a layer: which slot of how many it is, and the reductions that join the
// slots' partial results. Layers say *where* a reduction happens (Megatron's f and g operators);
// tandem/parallel supplies *how* (a communicator over the tp group). Size 1: no reductions at all.
#pragma once

#include "tandem/core/tensor.h"

namespace tandem::nn {

class TpReducer {
 public:
  virtual ~TpReducer() = default;
  virtual void sum(const Tensor& t) = 0;  // in place, over the tp group
  virtual void max(const Tensor& t) = 0;
};

struct TpSlot {
  int rank = 0;
  int size = 1;
  TpReducer* reducer = nullptr;  // required when size > 1

  bool active() const { return size > 1; }
  void sum(const Tensor& t) const {
    if (active()) reducer->sum(t);
  }
  void max(const Tensor& t) const {
    if (active()) reducer->max(t);
  }
};

// Which part of a logical tensor a parameter holds. The logical tensor, flattened, is viewed as
// (outer, split, inner); the parameter holds (outer, split / parts, inner), the `part`-th block of the
// middle dim. Covers row blocks (outer 1), column blocks (inner 1) and the three q/k/v row blocks of a
// fused projection (outer 3). parts == 1: the whole tensor.
struct Shard {
  int64_t outer = 1, split = 1, inner = 1;
  int part = 0, parts = 1;

  bool sharded() const { return parts > 1; }
  // Flat index in the logical tensor of the shard's flat element `i`.
  int64_t global_index(int64_t i) const {
    const int64_t local_split = split / parts;
    const int64_t o = i / (local_split * inner), rest = i % (local_split * inner);
    return (o * split + part * local_split) * inner + rest;
  }
};

}  // namespace tandem::nn
