// How far a layout of the equivalence matrix (test_equivalence.cc) may be from one device, by precision and feature,
// each bound beside the measurements it rests on.
#pragma once

namespace tandem {

// How far a layout may be from one device, relative: the first step's loss and gradient norm (the initial
// weights, so forward and backward alone), any step's loss, any one parameter tensor after the last step,
// and all parameters as one vector.
struct Bounds {
  double first_loss, first_grad_norm, loss, tensor, all;
};
const Bounds kF32 = {1e-5, 1e-5, 1e-5, 1e-4, 1e-5};
// LoRA with tp in fp32: only the small factors train, and a factor that tp replicates (A of a column-split layer, B of
// a row-split one) gets its gradient summed over the tp slots in another order than on one device. Early AdamW steps
// are about lr * sign(gradient), so an element whose gradient is near zero steps +-lr by that rounding, and with few
// trainable elements such steps weigh more in a tensor and in all of them. The gpt's factors reached 1.35e-4 (a
// tensor) and 2.3e-5 (all) on a CPU whose OpenBLAS runs its Haswell kernels, and stayed within kF32 on one that
// runs its AVX-512 ones; the bounds sit about 4x above. Losses and the first step keep kF32's.
const Bounds kF32LoraTp = {1e-5, 1e-5, 1e-5, 5e-4, 1e-4};
// The llama with tp in fp32: the input gradients' partial sums over the tp slots (q, k, v and gate, up are
// column-split) reach the embedding's rows rounded in another order than on one device, and an element whose gradient
// is near zero steps +-lr by it, as above. Its embedding reached 1.44e-4 (the tensor) and 1.08e-5 (all parameters) on
// dp1 x pp2 x tp2 interleaved with the initial values of core/random_fill.h, 1.06e-4 to 1.24e-4 on two other tp2
// layouts; the first step and every loss stay within kF32's 1e-5. The bounds sit about 2-3x above.
const Bounds kF32TpLlama = {1e-5, 1e-5, 1e-5, 3e-4, 3e-5};
// bf16 (fp32 master weights, moments and gradient reduction) against the single-device bf16 run. Measured
// over every layout of the fp32 matrix run in bf16 (156 cases on 4 and 8 processes), the largest differences:
//                         first loss  first grad norm  any loss  a tensor  all parameters
//   without tp (dp, pp)      1.1e-7        6.6e-10       1.6e-4    4.3e-2      1.6e-3
//   with tp                  4.7e-6        1.1e-3        3.3e-3    1.3e-1      2.5e-2
// Without tp each sample's bf16 arithmetic is the one device's; only the order of fp32 sums differs (the loss
// over micro-batches, gradients over dp), so the first step agrees to fp32 rounding (the fp32 cases reach
// 4.9e-8 on the gradient norm). With tp each slot's partial result (proj, out, the embedding; the input
// gradients in backward) is rounded to bf16 before the slots are summed: one more bf16 rounding, ~1e-3 of
// the gradient. Later steps drift further: early AdamW steps are about lr * sign(gradient), so an element
// whose gradient is near zero (the key bias above: exactly zero) steps +-lr by rounding noise, and at
// lr 1e-2 the weights part by a few lr. The bounds sit 2-5x above the measurements, except the first gradient
// norm without tp: 2x the fp32 cases' 4.9e-8, which have the same cause.
const Bounds kBf16 = {5e-7, 1e-7, 5e-4, 0.1, 5e-3};
const Bounds kBf16Tp = {2e-5, 3e-3, 1e-2, 0.3, 7.5e-2};
// The llama with tp: its first loss reaches 2.1e-5 (tied, pp2 x tp2), the same one bf16 rounding of each slot's
// partial sums (o and down are row-split, the vocabulary-split head feeds the loss) on a model whose logits come
// from a tied table; the other bounds as the gpt's.
const Bounds kBf16TpLlama = {1e-4, 3e-3, 1e-2, 0.3, 7.5e-2};

// FP8 (the blocks' projections in e4m3/e5m2): the first step, from the same weights, is the same function as on one
// device: within kF32's 1e-5 in fp32 (measured 2.8e-8 loss, 9.5e-9 gradient norm), within the bf16 bounds in bf16.
// After an update the layouts' weights differ by the fp32 rounding of their gradient sums (dp) or partial sums (tp),
// and FP8's rounding is a step function: a weight or activation one ulp to the other side of a rounding boundary
// moves by a whole e4m3 step (2^-3 relative), so later steps drift apart as bf16's do, more than fp32's. Measured over
// the cases below (the worst of 12, on 4 and 8 processes):
//                     first gradient norm  any loss  a tensor  all parameters
//   fp32 around FP8        9.5e-9            1.1e-3    4.8e-2      1.1e-2      (pipelines alone: 0, the same bits)
//   bf16 around FP8        2.7e-3            1.4e-2    3.3e-1      8.2e-2      (the first: bf16's tp rounding)
// The bounds sit about 2x above.
const Bounds kFp8 = {1e-5, 1e-5, 3e-3, 0.15, 3e-2};
const Bounds kFp8Bf16 = {1e-4, 6e-3, 3e-2, 0.6, 0.2};
// Gradients in e4m3 (the blockwise recipe's default) flip more roundings than e5m2's under tp, whose partial sums of
// the input gradients differ from one device's in the last fp32 bit, and the flips add up layer by layer: the first
// gradient norm of a tp2 llama (256 wide, one device against two slots, tensorwise) moves 3.8e-7, 1.4e-6, 2.2e-6 and
// 1.0e-5 at 2, 3, 4 and 6 layers with e4m3 gradients, 6e-11 at 4 layers with e5m2; the blockwise cases below measure
// 3.3e-5 in fp32 (loss 8.8e-4, a tensor 2.0e-2, all 7.5e-3). The first loss stays exact.
const Bounds kFp8E4m3 = {1e-5, 1e-4, 3e-3, 0.15, 3e-2};

}  // namespace tandem
