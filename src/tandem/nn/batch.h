// Batch: what one micro-batch brings to the layers besides the first layer's input, made once per micro-batch by the
// engine and handed, as an argument, to every layer's forward and backward (Layer's batch forms): its targets, for
// the head that computes the loss itself, its documents, which every attention reads, how many rows the
// long-sequence passes take at once (tiles.h), how its sequences are split over context-parallel shards
// (context_split.h), and where its samples sit in the run, which keys the draws every layout must make alike (LoRA's
// dropout masks). Layers that need none of it never look at it.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"
#include "tandem/nn/context_split.h"
#include "tandem/nn/tiles.h"

namespace tandem::nn {

// Where the step's loss goes, for a head that computes it (LlamaHead, GptHead: nn/loss.h's head_loss): the sum of the
// rows' losses, the number of rows that count in the whole global batch, and fp16's loss scale (1 otherwise).
struct LossSink {
  Tensor sum;               // (1) f32 on the device, added to (no host sync)
  double normalizer = 1.0;  // loss = sum / normalizer
  float grad_scale = 1.0f;  // the gradients are those of loss * grad_scale
};

// Where a micro-batch's samples sit in the run. A draw for a token (LoRA's dropout mask on its row) is keyed by the
// seed, the step, its sample's index in the step's global batch (first_sample + its index in the micro-batch) and its
// position in the whole sequence (the context split gives it under context parallelism), never by where the token
// lies on this device, so every layout draws the same.
struct SamplePlace {
  uint64_t seed = 0;         // the run's seed
  int64_t step = 0;          // the training step, 0-based
  int64_t first_sample = 0;  // the micro-batch's first sample: its index in the step's global batch
};

// The load-balancing loss of a mixture-of-experts model (moe.h) over one micro-batch, as transformers' MoE families
// define it: with C_e the choices of expert e and P_e the sum of its router probabilities, both over the R = tokens x
// MoE layers rows of the micro-batch, aux = E sum_e C_e P_e / R^2. Each MoE layer's forward adds its rows to the sums;
// the head adds coef x share x aux to the loss, and each router's backward takes its gradient by the probabilities,
// coef share E C_e / R^2, from the counts complete by then. Under context parallelism each shard's layers count its own
// tokens, R stays the whole sequences', and the head sums the counts and probabilities over the cp group (head_loss,
// loss.h) before it adds the loss, on one shard. Under pipeline parallelism the sums travel with the micro-batch
// (parallel/pipeline/executor.h): each stage adds its layers to the running sums the stage before it sent, in one
// device's layer order, and the last stage sends the totals back with the gradient for the earlier stages' routers.
struct MoeBalance {
  Tensor counts;       // (E) f32
  Tensor probsum;      // (E) f32
  int64_t rows = 0;    // R
  float coef = 0.0f;   // the loss's weight (router_aux_loss_coef); 0: the sums are kept, the loss left as it is
  double share = 1.0;  // the micro-batch's share of the step's loss: its samples over the global batch's
  // The same sums kept apart per MoE layer (row MoeShape::index), for the metrics alone: this rank's own tokens (no cp
  // sum), so that a layer whose router collapses shows, and a pipeline's stages can add up their layers'. Undefined:
  // not kept.
  Tensor layer_counts;   // (L, E) f32
  Tensor layer_probsum;  // (L, E) f32
  // (2E) f32: counts then probsum, the one buffer both view where the engine made them, which a pipeline stage sends
  // and receives whole; undefined where they were made apart.
  Tensor sums;
};

// Under context parallelism a layer's activations hold this shard's Tl = T / cp tokens of each sequence (in the
// split's order), and so do the targets; the documents are whole, for the attention that sees every token.
struct Batch {
  Tensor targets;    // (B*Tl) or (B) i32, ops::kIgnoreTarget where a row does not count; undefined off the last stage
  Tensor documents;  // (B, T) i32 each position's document (data.document_mask), attention kept inside each; or none
  // Set: the model's head computes the loss into it (the model's output is then undefined, and its backward starts
  // from nothing); null: the head returns logits and the caller computes the loss (tests, the mlp models).
  const LossSink* loss = nullptr;
  // A backward follows the forward (a training step, its recomputation too): with a sink, the head computes the loss
  // in its backward, and dropout applies.
  bool training = false;
  Tiles tiles;           // the loss's chunks, the MLPs' tiles, attention's blocks (0: their rules' choice)
  ContextSplit context;  // this shard of the sequences (size 1: whole sequences)
  SamplePlace samples;   // where its samples sit in the run
  // A mixture-of-experts model's balance sums for this micro-batch (MoeBalance), or null (no MoE layers).
  const MoeBalance* balance = nullptr;
  // Activation checkpointing's first forward keeps each block's attention output for the second (parallel.
  // keep_attention, Saved::kept), which then takes it instead of running attention again.
  bool keep_attention = false;
};

}  // namespace tandem::nn
