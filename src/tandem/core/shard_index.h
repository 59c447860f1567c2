// Where one part of a logical tensor sits in it, as one function the host and kernels both compile: nn::Shard (the
// tensor-parallel part a parameter holds) indexes with it, and so do the kernels that draw a part's initial values.
#pragma once

#include <cstdint>

#include "tandem/core/host_device.h"

namespace tandem {

// The flat index in a logical tensor of flat element `i` of one part of it. The logical tensor is viewed as
// (outer, split, inner) and the part holds (outer, split / parts, inner): piece `part` of the middle dim, or, with
// `nblocks` > 0, piece `part` of each of the consecutive blocks `blocks` (summing to split) back to back (a fused
// projection's q, k and v). -1 past the part's end.
TANDEM_HOST_DEVICE inline int64_t shard_global_index(int64_t outer, int64_t split, int64_t inner, int64_t part,
                                                     int64_t parts, const int64_t* blocks, int nblocks, int64_t i) {
  const int64_t local_split = split / parts;
  const int64_t o = i / (local_split * inner), rest = i % (local_split * inner);
  if (nblocks == 0) return (o * split + part * local_split) * inner + rest;
  int64_t row = rest / inner, start = 0;  // row within this part's middle dim; start of its block in the whole
  for (int k = 0; k < nblocks; ++k) {
    const int64_t piece = blocks[k] / parts;
    if (row < piece) return (o * split + start + part * piece + row) * inner + rest % inner;
    row -= piece;
    start += blocks[k];
  }
  return -1;
}

// shard_global_index's arguments as plain values a kernel takes by value.
struct ShardIndex {
  static constexpr int kMaxBlocks = 4;
  int64_t outer = 1, split = 1, inner = 1, part = 0, parts = 1;
  int nblocks = 0;
  int64_t blocks[kMaxBlocks] = {};

  TANDEM_HOST_DEVICE int64_t global_index(int64_t i) const {
    return shard_global_index(outer, split, inner, part, parts, blocks, nblocks, i);
  }
};

}  // namespace tandem
