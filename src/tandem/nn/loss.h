// The training loss: softmax cross-entropy, mean over the tokens (or samples) of the global batch.
// Vocabulary-parallel when the logits are a tp slot's slice of the vocabulary: the row max, the sum of
// exponentials and the target's logit are each reduced over tp, so no slot ever holds all V logits.
#pragma once

#include "tandem/core/tensor.h"
#include "tandem/nn/batch.h"
#include "tandem/nn/layer.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/tensor_parallel.h"

namespace tandem::nn {

// logits (N, V_local) or (B, T, V_local) in the compute dtype, slot tp.rank's columns
// [rank V_local, (rank+1) V_local) of V = V_local * tp.size; targets (N) i32 in [0, V), or ops::kIgnoreTarget for a
// row that does not count (a masked position: no loss, no gradient).
// loss_sum (1) f32 += the sum of the rows' losses (the same on every slot), on the device: no host sync.
// The logits are overwritten with d(loss)/d(logits) for loss = sum / `normalizer` (the number of rows that count in
// the whole global batch, so micro-batches and replicas add up to the mean), times `grad_scale` (the fp16 loss
// scale; 1 otherwise).
void cross_entropy_loss(const Tensor& logits, const Tensor& targets, double normalizer, const Tensor& loss_sum,
                        const TpSlot& tp = {}, float grad_scale = 1.0f);

// The same, returning the sum on the host (tests and one-device tools).
double cross_entropy_sum_and_grad(const Tensor& logits, const Tensor& targets, double normalizer,
                                  const TpSlot& tp = {});

// The vocabulary head's product and the loss, a chunk of rows at a time (batch.tiles.loss_tokens, tiles.h's rule), so
// that no more than one chunk's logits (rows, V_local) is ever held: whole, the (B, T, V) logits are 33.6 GB at T 128k
// for a 128k vocabulary.
// h (..., C): the head's input (the final norm's output); head: the vocabulary projection (column-parallel under tp,
// its slot's V_local columns: the loss is vocabulary-parallel over the same slot `tp`); batch.targets (N) i32 for the
// N rows of h; the rows' losses are added to batch.loss's sum, and so is a mixture of experts' balance loss
// (batch.balance, its sums first completed over the context-parallel shards).
// With `backward`, returns d(loss)/dh (h's shape) and accumulates the head's weight gradient, each chunk's product,
// cross-entropy and gradient products done before the next chunk's logits are made; without (evaluation), returns an
// undefined tensor. With one chunk it runs exactly the ops of the head's forward, cross_entropy_loss and the head's
// backward; with several, the weight gradient is summed chunk by chunk.
Tensor head_loss(Layer& head, const TpSlot& tp, const Tensor& h, const Batch& batch, bool backward);

// The gpt and llama heads' two halves after their final norm, h (B, T, C) its output; `saved` is the head's own,
// children[1] the projection's. head_forward: without a loss sink in the batch, the logits (B, T, V_local); with one,
// nothing: in a training step it keeps h for the backward, in evaluation it computes the loss now. head_backward:
// d(loss)/dh from the logits' gradient dy, or with a sink from head_loss.
Tensor head_forward(Linear& head, const Tensor& h, const Batch& batch, Saved& saved);
Tensor head_backward(Linear& head, const Tensor& dy, const Batch& batch, Saved& saved);

}  // namespace tandem::nn
