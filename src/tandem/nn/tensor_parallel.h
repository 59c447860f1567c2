// Tensor parallelism as seen by a layer: which slot of how many it is, and the reductions that join the
// slots' partial results. Layers say *where* a reduction happens (Megatron's f and g operators);
// tandem/parallel supplies *how* (a communicator over the tp group). Size 1: no reductions at all.
#pragma once

#include <vector>

#include "tandem/core/shard_index.h"
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
// Fused projections of unequal sizes (grouped-query attention's q, k, v of H*D, Hkv*D, Hkv*D rows): `blocks` lists
// the sizes of consecutive blocks of the middle dim (summing to split); each block is divided into `parts` equal
// pieces and the parameter holds piece `part` of every block, back to back. Empty: the equal form above.
struct Shard {
  int64_t outer = 1, split = 1, inner = 1;
  int part = 0, parts = 1;
  std::vector<int64_t> blocks = {};

  bool sharded() const { return parts > 1; }
  // Flat index in the logical tensor of the shard's flat element `i`.
  int64_t global_index(int64_t i) const {
    return shard_global_index(outer, split, inner, part, parts, blocks.data(), static_cast<int>(blocks.size()), i);
  }
  // The same as plain values, for a kernel (at most ShardIndex::kMaxBlocks blocks).
  ShardIndex index() const;
  // The sizes multiply out to `numel` and every block divides into `parts`.
  bool valid(int64_t numel) const {
    if (outer * split * inner != numel || parts < 1 || part < 0 || part >= parts || split % parts != 0) return false;
    if (blocks.empty()) return true;
    int64_t sum = 0;
    for (const int64_t b : blocks) {
      if (b <= 0 || b % parts != 0) return false;
      sum += b;
    }
    return sum == split;
  }
};

}  // namespace tandem::nn
