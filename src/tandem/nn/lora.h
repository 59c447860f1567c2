// LoRA adapters on a frozen projection (Hu et al. 2021), computed as Hugging Face PEFT's lora.Linear computes them:
// y = x W^T + b + s * (dropout(x) A^T) B^T for each adapted block of the outputs, s = lora_alpha / r (or
// lora_alpha / sqrt(r) with use_rslora), A (r, in) and B (out, r) trainable, W and b frozen. This file owns the
// adapters' math; which projections carry them is the model builder's, and Linear (linear.h) calls it around its own
// product. It never communicates: the tensor-parallel sums go through the layer's TpSlot.
// Legend: N rows (tokens), in / out the layer's input and output widths, r the rank, s the scaling.
//
// Fused projections: a Linear whose outputs stack several projections (Llama's q | k | v, gate | up) carries one
// adapter per adapted block, on that block's rows only: an adapter on q_proj alone changes the q rows of the fused
// qkv and nothing else, exactly as PEFT's separate q_proj. A block's adapter contributes s h B_pad^T where B_pad is B
// placed at the block's rows of an (out, r) matrix of zeros, so every product stays one dense GEMM (the zeros add
// exact zeros).
// Merged: the k adapters of a fused projection without dropout run as one adapter of rank k r, A_cat = [A_1; ..; A_k]
// (k r, in) and B_blk (out, k r) block-diagonal (B_j at its block's rows and columns [j r, (j + 1) r)), so the
// layer's output, its gradient and its input gradient are read and written once per pass instead of k times. Each
// output still sums only its own adapter's r terms (plus exact zeros), so the forward is the separate adapters' to the
// bit. B_j is copied into B_blk's columns, and dB_j's part of dY^T H_cat copied out of them and added (ops::
// copy_columns): the placement is exact, and nothing is kept from one call to the next.
//
// Tensor parallelism (Megatron's notation; slot i of tp, X the layer's input):
//   column-parallel, W = [W_1; ..; W_tp] split by rows, X replicated. A is whole on every slot; B = [B_1; ..; B_tp]
//   is split by rows as W is (each fused block separately, as W's), so Y_i = X W_i^T + s (X A^T) B_i^T.
//   H = X A^T is the same on every slot. Backward from dY_i: dB_i = s dY_i^T H (the slot's rows, nothing to sum);
//   G_i = s dY_i B_i is slot i's part of dH = sum_i G_i. The input gradient dX = sum_i (dY_i W_i + G_i A) is summed
//   over tp once, with the base's (the layer's f), and dH = sum_i G_i is summed over tp before dA = dH^T X, so A's
//   gradient is the same on every slot, as A itself is.
//   row-parallel, W = [W_1 .. W_tp] split by columns, X = [X_1 .. X_tp]. A = [A_1 .. A_tp] is split by columns as W
//   is; B is whole on every slot. H = sum_i X_i A_i^T is summed over tp (g) before Y = sum_i X_i W_i^T + s H B^T + b.
//   Backward, dY replicated: dB = s dY^T H and G = s dY B are the same on every slot; dA_i = G^T X_i and
//   dX_i = dY W_i + G A_i are the slot's own.
// So A of a column-parallel layer and B of a row-parallel layer are replicated over tp with equal gradients, and the
// other factor is sharded like W: every slot's copy of a replicated factor takes the same update.
//
// Dropout (lora_dropout p > 0, while training: Batch::training): each adapter draws its own mask on its input,
// element (row, column) of the logical input kept with probability 1 - p from the counter-based generator keyed by
// (seed, the adapter's name, step) and the element's index in the whole batch of the step (global sample, position in
// the whole sequence, logical column), all read from the micro-batch's Batch (its SamplePlace, and its context split
// for a shard's positions), so every layout draws the same mask for the same token: the index of the element at
// (sample s, position t, column j) is ((first_sample + s) T + t) in + j. Kept elements are scaled by 1 / (1 - p).
// p = 0 costs nothing.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tandem/nn/layer.h"
#include "tandem/spec/lora.h"

namespace tandem::nn {

// What every adapter of a model shares.
struct LoraOptions {
  int64_t r = 8;
  float scaling = 1.0f;  // s
  float dropout = 0.0f;  // p
  spec::LoraInit init = spec::LoraInit::Default;
};

// Which projections of a model carry adapters, by Tandem's site names: "<linear>" for an adapter on every output of
// a projection ("blocks.<i>.qkv", GPT-2's c_attn), "<linear>.<part>" for one block of a fused one ("layers.<i>.qkv.q",
// "layers.<i>.gate_up.up"). The builders freeze the whole model and add these.
struct LoraTargets {
  LoraOptions options;
  std::set<std::string> sites;
};

// A model builder's helper: without targets it passes layers through; with them it freezes every layer and adds the
// adapters at the sites a layer has (its add_lora) and counts them, so that a site no layer has is an error.
class LoraSites {
 public:
  explicit LoraSites(const LoraTargets* targets);
  template <class L>
  std::unique_ptr<L> frozen(std::unique_ptr<L> layer) {
    if (targets_) layer->freeze();
    return layer;
  }
  template <class L>
  std::unique_ptr<L> adapted(std::unique_ptr<L> layer) {
    if (targets_) added_ += static_cast<size_t>(layer->add_lora(*targets_));
    return layer;
  }
  // Throws when fewer adapters were added than the targets name.
  void check_all_added() const;

 private:
  std::optional<LoraTargets> targets_;
  size_t added_ = 0;
};

// PEFT's initialisations of a fresh adapter's A (r, in_global) and B (rows, r), declared Init::Uniform and Init::Zeros:
// A as torch's nn.Linear (kaiming-uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B zeros; init_lora_weights
// false leaves B as nn.Linear too (U(-1/sqrt(b_in), 1/sqrt(b_in)), b_in its nn.Linear's input width: r, or r E for the
// experts' B, PEFT's (out, r E)); "gaussian" draws A from N(0, 1/r). Marks both adapters.
void init_lora_pair(Parameter& a, Parameter& b, const LoraOptions& options, int64_t in_global, int64_t b_in = 0);

// The adapters of one projection. Linear owns one, declares the parameters on itself and calls it in its forward
// and backward.
class LoraAdapters {
 public:
  // One adapter: A (r, in_local) and B (rows, r), on rows [row, row + rows) of the layer's local output.
  struct Adapter {
    Parameter* a;
    Parameter* b;
    int64_t row, rows;
  };
  // `split` and `tp`: the layer's; `in_local` / `in_global`: its input width on this slot and in all.
  LoraAdapters(LoraOptions options, bool row_parallel, TpSlot tp, int64_t in_local, int64_t in_global,
               int64_t out_local);

  void add(Adapter adapter) { adapters_.push_back(adapter); }
  bool empty() const { return adapters_.empty(); }
  const LoraOptions& options() const { return options_; }

  // x (B, T, in_local) (or (B, in_local): one row per sample) -> one (N, r) per adapter: s dropout(x) A^T, summed
  // over tp for a row-parallel layer (in the merged form one (N, k r), the adapters' side by side). What backward
  // needs besides x. `batch`: the micro-batch x belongs to, which keys the dropout mask.
  std::vector<Tensor> down(const Tensor& x, const Batch& batch) const;
  // y (N, out_local) = beta y + sum of h B_pad^T over the adapters' h (from down). beta 0 writes y without reading
  // it: the layer then adds its own product into it (one pass over y fewer than adding the adapters after it).
  void up(const std::vector<Tensor>& h, const Tensor& y, float beta = 1.0f) const;
  // Accumulates the adapters' gradients and puts their part of the input gradient into dx (N, in_local), added to
  // it (beta 1) or written over it (beta 0, which writes_input_grad() allows): a column-parallel layer's dx is its
  // partial sum, which the layer then sums over tp.
  void backward(const Tensor& x, const std::vector<Tensor>& h, const Tensor& dy, const Tensor& dx, const Batch& batch,
                float beta = 1.0f) const;
  // Whether backward can write dx rather than add to it: not with a dropout mask, whose input gradient adds a masked
  // copy.
  bool writes_input_grad(const Batch& batch) const { return !masking(batch); }

 private:
  // B at its rows of an (out_local, r) matrix of zeros; B itself when it spans every output.
  Tensor padded_b(const Adapter& a) const;
  // Whether the adapters run as one (the merged form above): several of them, no dropout mask.
  bool merged(const Batch& batch) const;
  // A_cat (k r, in_local) and B_blk (out_local, k r) of the merged form.
  Tensor stacked_a(const Tensor& like) const;
  Tensor block_diagonal_b(const Tensor& like) const;
  std::vector<Tensor> down_merged(const Tensor& rows) const;
  void backward_merged(const Tensor& rows, const Tensor& h, const Tensor& g_out, const Tensor& g_in, float beta) const;
  // Whether this micro-batch's inputs are masked: dropout > 0 while training.
  bool masking(const Batch& batch) const;
  // rows (N, in_local) of `samples` samples (N / samples rows each, this shard's tokens of them) with the adapter's
  // mask applied (rows itself when not masking).
  Tensor dropped(const Adapter& a, const Tensor& rows, int64_t samples, const Batch& batch) const;

  LoraOptions options_;
  bool row_parallel_;
  TpSlot tp_;
  int64_t in_local_, in_global_, out_local_;
  std::vector<Adapter> adapters_;
};

}  // namespace tandem::nn
