// The training loss: softmax cross-entropy, mean over the tokens (or samples) of the global batch.
// Vocabulary-parallel when the logits are a tp slot's slice of the vocabulary: the row max, the sum of
// exponentials and the target's logit are each reduced over tp, so no slot ever holds all V logits.
#pragma once

#include "tandem/core/tensor.h"
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

}  // namespace tandem::nn
