// Context parallelism: each sequence of a micro-batch split over the cp devices of one stage (layout.h), so that a
// device holds T / cp of its tokens in every layer. Everything but attention works on its own tokens. Attention runs in
// one of two ways (parallel.context_attention, spec/context_attention.h): by heads, regrouping by all-to-all
// (DeepSpeed's Ulysses): before it, every shard trades its tokens of all heads for all tokens of 1 / cp of the heads,
// runs causal attention over the whole sequence for those heads, and trades back; or by a ring (ring_attention.h): each
// shard keeps its tokens of every head and the key/value blocks of the shards pass around the cp group.
//
// The causal load balance: a sequence is cut into 2 cp chunks of T / (2 cp) tokens, and shard r holds chunks r and
// 2 cp - 1 - r, back to back (Megatron's order: an early and a late chunk, so a ring exchange would also balance; under
// all-to-all it costs nothing). Example, cp 2, T 8: shard 0 holds positions 0 1 6 7, shard 1 holds 2 3 4 5.
// Legend: B batch, T the whole sequence, Tl = T / cp a shard's tokens, W columns of a row.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/spec/context_attention.h"

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

  // A ring pass in flight: wait() returns once this shard's send and receive are both done.
  class Pass {
   public:
    virtual ~Pass() = default;
    virtual void wait() = 0;
  };
  // Ring attention's step: `send` to the next shard (rank + 1 mod cp), `recv` (the same shape) from the previous one.
  // Started now, so compute runs while it travels; every shard starts its passes in the same order, and they arrive in
  // that order.
  virtual std::unique_ptr<Pass> pass(const Tensor& send, const Tensor& recv) = 0;
};

struct ContextSplit {
  int rank = 0;
  int size = 1;
  ContextExchange* exchange = nullptr;                              // required when size > 1
  spec::ContextAttention attention = spec::ContextAttention::Auto;  // as the config asks

  bool active() const { return size > 1; }
  // Whether a slot of `heads` query heads over `kv_heads` runs ring attention (spec::context_attention_used), else
  // attention by heads; false with whole sequences.
  bool ring(int64_t heads, int64_t kv_heads) const {
    return active() && spec::context_attention_used(attention, heads, kv_heads, size) == spec::ContextAttention::Ring;
  }
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

  // Grouped-query attention's regrouping, q | k | v of a slot's H query heads over Hkv key/value heads of D columns.
  // Where cp divides Hkv, each shard gets H / cp query heads over Hkv / cp kv heads. Where a slot has fewer kv heads
  // than shards (cp = r Hkv, r > 1, and cp dividing H), each kv head is first repeated r times, copies side by side,
  // so shard s gets copy s % r of kv head s / r: the one kv head its query heads [s H / cp, (s + 1) H / cp) use, as a
  // kv group of H / Hkv = r H / cp query heads holds whole shards' runs. kv_copies gives r (1 where cp divides Hkv).
  int kv_copies(int64_t kv_heads) const;
  // qkv (B, Tl, (H + 2 Hkv) D) -> (B, T, (H + 2 r Hkv) D / cp): this shard's heads, every token. Collective.
  Tensor gather_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads) const;
  // Its gradient: dqkv (B, T, (H + 2 r Hkv) D / cp) -> (B, Tl, (H + 2 Hkv) D), the gradients of a kv head's r copies
  // summed copy 0 first, then 1, ... (the same order on every run). Collective.
  Tensor scatter_qkv(const Tensor& dqkv, int64_t heads, int64_t kv_heads) const;
};

}  // namespace tandem::nn
