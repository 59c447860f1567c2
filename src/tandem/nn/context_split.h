// Context parallelism: each sequence of a micro-batch split over the cp devices of one stage (layout.h), so that a
// device holds T / cp of its tokens in every layer. Everything but attention works on its own tokens; attention
// regroups by all-to-all (DeepSpeed's Ulysses): before it, every shard trades its tokens of all heads for all tokens
// of 1 / cp of the heads, runs causal attention over the whole sequence for those heads, and trades back.
//
// The causal load balance: a sequence is cut into 2 cp chunks of T / (2 cp) tokens, and shard r holds chunks r and
// 2 cp - 1 - r, back to back (Megatron's order: an early and a late chunk, so a ring exchange would also balance; under
// all-to-all it costs nothing). Example, cp 2, T 8: shard 0 holds positions 0 1 6 7, shard 1 holds 2 3 4 5.
// Legend: B batch, T the whole sequence, Tl = T / cp a shard's tokens, W columns of a row.
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::nn {

// The collectives of the cp group (comm::Communicator's all_to_all and all_reduce), given to the layers as an interface
// so nn needs no communicator (parallel/tensor/context_exchange.h implements it).
class ContextExchange {
 public:
  virtual ~ContextExchange() = default;
  // out (cp * n): slice j is shard j's slice [rank n, (rank + 1) n) of its in (cp * n).
  virtual void all_to_all(const Tensor& in, const Tensor& out) = 0;
  // x summed over the cp group, in place, every shard getting the same sum (a mixture of experts' balance sums: each
  // shard counts only its own tokens).
  virtual void sum(const Tensor& x) = 0;
  // t (any shape) in place: the elementwise maximum over the cp group (FP8's amaxes of blocks that span the tokens).
  virtual void max(const Tensor& t) = 0;
};

struct ContextSplit {
  int rank = 0;
  int size = 1;
  ContextExchange* exchange = nullptr;  // required when size > 1

  bool active() const { return size > 1; }
  // t in place: the elementwise maximum over the shards; nothing with whole sequences.
  void max(const Tensor& t) const {
    if (active()) exchange->max(t);
  }
  // Tokens in each of the 2 cp chunks of a sequence of T (T divisible by 2 cp, checked).
  int64_t chunk(int64_t T) const;
  // The first position of this shard's chunk k (0: the early one, 1: the late one) in a sequence of T.
  int64_t chunk_start(int64_t T, int k) const { return chunk_start_of(rank, T, k); }
  int64_t chunk_start_of(int shard, int64_t T, int k) const;
  // This shard's tokens of a sequence of T as runs of consecutive positions: its tokens [local, local + count) are
  // positions [position, position + count) of the whole sequence (example above, shard 0: {0, 0, 2}, {2, 6, 2}).
  // Whole sequences: one run of T.
  struct Run {
    int64_t local, position, count;
  };
  std::vector<Run> runs(int64_t T) const;

  // This shard's part of a micro-batch, rows in the order above: tokens (B, T) -> (B, Tl), any dtype; and targets
  // (B*T) -> (B*Tl). Copies on the tensors' device.
  Tensor shard_sequences(const Tensor& x) const;

  // Attention's regrouping. x (B, Tl, W) holds column parts of `parts` widths (summing to W, each divisible by cp:
  // q | k | v of their heads, or one part for the attention output); the result (B, T, W / cp) holds every token, in
  // order, of slice `rank` of each part (its heads). Collective over the cp group.
  Tensor gather_sequence(const Tensor& x, const std::vector<int64_t>& parts) const;
  // The inverse: x (B, T, W / cp), slice `rank` of each part -> (B, Tl, W), every part whole, this shard's tokens.
  Tensor scatter_sequence(const Tensor& x, const std::vector<int64_t>& parts) const;
};

}  // namespace tandem::nn
