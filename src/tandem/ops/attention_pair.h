// Ring attention's ops (context parallelism by a ring exchange of k/v, nn/ring_attention.h): attention of one block of
// queries against one block of keys and values, the merge of such partial results by their log-sum-exps, and the
// backward of one block pair given the merged output. Grouped-query as attention_gqa (ops.h): query head h uses kv head
// h / (H / Hkv). Each query block's result over every key block it sees, merged in a fixed order, is the attention over
// all of them.
//
// These ops sit outside the op table (op_list.h) so far: the front end (attention_pair.cc) checks them and runs the CPU
// kernels (cpu/attention_pair.cc) or the CUDA ones (cuda/attention_pair.cu: plain, not tiled on the tensor cores), or
// on a counting device takes the planned backend's kernels' scratch and records their work as the table's ops do
// (counting.cc).
// Legend: B batch, Tq and Tk the query and key blocks' tokens, H query heads, Hkv key/value heads, D head dim, T the
// whole sequence.
// Dtypes: q, kv, y (backward) and dy any one float dtype; the partial y, the merged y and every lse f32; dq and dkv f32
// accumulators.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"

namespace tandem::ops {

// Which keys of a block pair a query sees, by their places in the sequence: the query block holds positions [q0, q0 +
// Tq), the key block [k0, k0 + Tk), and query row i sees the keys at positions up to its own, q0 + i (causal), and
// with documents (B, T) i32 (each position's document, non-decreasing along the sequence, as
// attention_gqa_documents_forward's) only those of its own document. A row may see none of a block's keys (a key
// block after it, or before its document): its y is 0 and its lse -inf, which the merge leaves out.
struct PairPlace {
  int64_t q0 = 0, k0 = 0;
  Tensor documents;  // (B, T) i32, or undefined: one document
};

// q (B, Tq, H D), kv (B, Tk, 2 Hkv D) (k | v along the row); y (B, Tq, H D) f32 = softmax(q k^T / sqrt(D) + mask) v,
// heads concatenated; lse (B, H, Tq) f32 each row's log-sum-exp.
void attention_pair_forward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                            const Tensor& y, const Tensor& lse);

// (y, lse) the running result (B, Tq, H D) f32 and (B, H, Tq) f32, (y_part, lse_part) another block pair's: lse' =
// log(e^lse + e^lse_part), y' = y e^(lse - lse') + y_part e^(lse_part - lse'), in place. A running lse of -inf (no
// block yet, y 0) takes the part as it is; a part's -inf leaves the result as it is.
void attention_merge(const Tensor& y_part, const Tensor& lse_part, const Tensor& y, const Tensor& lse);

// The gradients of one block pair: y (B, Tq, H D) and lse (B, H, Tq) f32 the merged output of every block, dy (B, Tq,
// H D) its gradient; the pair's probabilities are exp(scores - lse) on the keys each row sees. dq (B, Tq, H D) f32 and
// dkv (B, Tk, 2 Hkv D) f32 (dk | dv) add this pair's gradients; a kv head's query heads add in head order (the same
// bits every run).
void attention_pair_backward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                             const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dq, const Tensor& dkv);

}  // namespace tandem::ops
