// Ring attention (parallel.context_attention "ring"): causal attention over sequences split by ContextSplit, each
// shard keeping its own tokens of every head. The shards' key/value blocks travel around the cp group: at step t shard
// r holds shard (r - t) mod cp's, and passes it on to shard r + 1 while it computes (the next pass posted before the
// step's compute). A shard's two chunks of queries (positions chunk r and 2 cp - 1 - r) meet each held shard's two
// chunks of keys as block pairs: full where every key precedes every query, causal on the same chunk, skipped where
// every key follows; with documents each query also sees only its own document's keys (ops::PairPlace). The pairs'
// partial outputs merge by their log-sum-exps in step order, then chunk order, so the same bits come every run.
// Backward passes the key/value blocks around again, each with its gradient, to which every shard adds its pairs' in
// turn (shard s's from shard s first, then s + 1, ...); one more pass brings each gradient home. Cost a layer: cp - 1
// passes of a shard's B Tl 2 Hkv D key/value values forward; backward cp - 1 of them and cp of their f32 gradients.
// Legend: B batch, Tl a shard's tokens of each sequence (its two chunks of c = Tl / 2), H query heads and Hkv key/value
// heads of a tensor-parallel slot, D head dim, W = (H + 2 Hkv) D.
#pragma once

#include "tandem/core/tensor.h"
#include "tandem/nn/context_split.h"

namespace tandem::nn {

// qkv (B, Tl, W) this shard's q | k | v, q and k rotated at their whole-sequence positions; documents (B, T) i32 of the
// whole sequences, or undefined; y (B, Tl, H D) in qkv's dtype and lse (B, H, Tl) f32, as attention_gqa_forward's (or
// attention_gqa_documents_forward's) of these tokens over the whole sequence. Collective over the cp group.
void ring_attention_forward(const ContextSplit& cp, const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                            const Tensor& y, const Tensor& lse);

// Its backward: y, lse as forward gave them, dy (B, Tl, H D); dqkv (B, Tl, W) in qkv's dtype, overwritten with the
// gradients of this shard's q, k and v (k and v's summed over every shard's queries). Collective over the cp group.
void ring_attention_backward(const ContextSplit& cp, const Tensor& qkv, int heads, int kv_heads,
                             const Tensor& documents, const Tensor& y, const Tensor& lse, const Tensor& dy,
                             const Tensor& dqkv);

}  // namespace tandem::nn
