#include "tandem/nn/llama_layers.h"

#include <algorithm>

#include "tandem/device/counting_device.h"
#include "tandem/nn/loss.h"
#include "tandem/nn/ring_attention.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {

RmsNorm::RmsNorm(std::string name, int64_t dim, float eps) : Layer(std::move(name)), dim_(dim), eps_(eps) {
  weight_ = &add_parameter("weight", {dim}, Init::Ones, false);
}

Tensor RmsNorm::forward(const Tensor& x, Saved& saved) {
  TANDEM_CHECK(x.dim(-1) == dim_, name(), " expects last dim ", dim_, ", got ", shape_str(x.shape()));
  const int64_t rows = x.numel() / dim_;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " output");  // (..., C)
  Tensor rstd = Tensor::empty({rows}, DType::F32, x.device(), name() + " rstd");   // (N)
  ops::rmsnorm_forward(x.view({rows, dim_}), weight_->value, y.view({rows, dim_}), rstd, eps_);
  saved.tensors = {x, rstd};
  return y;
}

Tensor RmsNorm::backward(const Tensor& dy, Saved& saved) {
  const Tensor x = saved.tensors.at(0);
  const int64_t rows = x.numel() / dim_;
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " input grad");
  ops::rmsnorm_backward(dy.view({rows, dim_}), x.view({rows, dim_}), weight_->value, saved.tensors.at(1),
                        dx.view({rows, dim_}), gradient_or_sink(*weight_, x.device()));
  saved.clear();
  return dx;
}

Tensor RmsNorm::backward_add(const Tensor& dy, const Tensor& dres, Saved& saved) {
  const Tensor x = saved.tensors.at(0);
  const int64_t rows = x.numel() / dim_;
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " input grad");
  ops::rmsnorm_backward_add(dy.view({rows, dim_}), x.view({rows, dim_}), weight_->value, saved.tensors.at(1),
                            dres.view({rows, dim_}), dx.view({rows, dim_}), gradient_or_sink(*weight_, x.device()));
  saved.clear();
  return dx;
}

void RopeCache::place(Device& device) {
  if (device_ == &device) return;
  const PurposeScope scope(device, MemoryPurpose::Other);
  cos_ = Tensor::empty({positions(), half()}, DType::F32, device, "rotary cos table");
  sin_ = Tensor::empty({positions(), half()}, DType::F32, device, "rotary sin table");
  if (device::as_counting(device)) {  // holds nothing, reads nothing
    device_ = &device;
    return;
  }
  if (host_.positions == 0) host_ = ops::rope_tables(frequencies_, positions_);
  ops::copy_rope_tables(host_, cos_, sin_);
  device_ = &device;
}

const Tensor& RopeCache::cos(Device& device) {
  place(device);
  return cos_;
}

const Tensor& RopeCache::sin(Device& device) {
  place(device);
  return sin_;
}

LlamaEmbedding::LlamaEmbedding(int64_t vocab_size, int64_t max_seq_len, int64_t dim, TpSlot tp)
    : Layer(""), vocab_(vocab_size), max_seq_(max_seq_len), dim_(dim), tp_(tp) {
  TANDEM_CHECK(vocab_ % tp.size == 0, "vocabulary ", vocab_, " over ", tp.size, " slots");
  weight_ = &add_sharded_parameter("embed.weight", {vocab_, dim_}, {vocab_ / tp.size, dim_},
                                   Shard{1, vocab_, dim_, tp.rank, tp.size}, Init::Normal, true);
}

Tensor LlamaEmbedding::forward(const Tensor& tokens, Saved& saved) {
  TANDEM_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::I32, "embedding expects (B, T) i32 tokens, got ",
               shape_str(tokens.shape()));
  const int64_t B = tokens.dim(0), T = tokens.dim(1);
  if (T > max_seq_) TANDEM_FAIL("sequence of ", T, " tokens is longer than the model's seq_len ", max_seq_);
  Tensor x = Tensor::empty({B, T, dim_}, weight_->value.dtype(), tokens.device(), "embedding output");  // (B, T, C)
  const int64_t start = tp_.rank * (vocab_ / tp_.size);
  ops::embedding_forward(tokens.view({B * T}), weight_->value, x.view({B * T, dim_}), start, vocab_);
  tp_.sum(x);
  saved.tensors = {tokens};
  return x;
}

Tensor LlamaEmbedding::backward(const Tensor& dy, Saved& saved) {
  const Tensor tokens = saved.tensors.at(0);  // (B, T)
  if (!weight_->trainable) {
    saved.clear();
    return Tensor();
  }
  const int64_t start = tp_.rank * (vocab_ / tp_.size);
  ops::embedding_backward(tokens.view({tokens.numel()}), dy.view({tokens.numel(), dim_}), weight_->grad, start);
  saved.clear();
  return Tensor();
}

LlamaBlock::LlamaBlock(int index, const LlamaBlockShape& s, std::shared_ptr<RopeCache> rope, TpSlot tp)
    : Layer("layers." + std::to_string(index)),
      heads_(s.heads / tp.size),
      kv_heads_(s.kv_heads / tp.size),
      eps_(s.eps),
      tp_(tp),
      rope_(std::move(rope)),
      attn_norm_(child_name("attn_norm"), s.dim, s.eps),
      qkv_(child_name("qkv"), s.dim, {s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim},
           s.qkv_bias, Split::Column, tp),
      o_(child_name("o"), s.heads * s.head_dim, s.dim, s.o_bias, Split::Row, tp),
      mlp_norm_(child_name("mlp_norm"), s.dim, s.eps) {
  // build_llama refuses these with what to change; here they guard a block built directly.
  TANDEM_CHECK(s.heads > 0 && s.kv_heads > 0 && s.heads % s.kv_heads == 0, name(), ": ", s.heads, " heads over ",
               s.kv_heads, " kv heads");
  TANDEM_CHECK(s.heads % tp.size == 0 && s.kv_heads % tp.size == 0, name(), ": ", s.heads, " heads and ", s.kv_heads,
               " kv heads over ", tp.size, " tensor-parallel slots");
  TANDEM_CHECK(rope_ && 2 * rope_->half() == s.head_dim, name(), ": rotary tables for head dim ",
               rope_ ? 2 * rope_->half() : 0, ", not ", s.head_dim);
  if (s.qk_norm) {
    q_norm_ = &add_parameter("q_norm.weight", {s.head_dim}, Init::Ones, false);
    k_norm_ = &add_parameter("k_norm.weight", {s.head_dim}, Init::Ones, false);
  }
  if (s.qk_norm_whole) {
    // One head of H D for q and one of Hkv D for k: the per-head norm over them needs them alike. Under tp each slot
    // holds the gains' entries of its own heads, as qkv holds their rows.
    TANDEM_CHECK(s.heads == s.kv_heads, name(), ": q and k normalised whole need as many kv heads (", s.kv_heads,
                 ") as heads (", s.heads, ")");
    const int64_t q = s.heads * s.head_dim, k = s.kv_heads * s.head_dim;
    q_norm_ = &add_sharded_parameter("q_norm.weight", {q}, {q / tp.size}, Shard{1, q, 1, tp.rank, tp.size}, Init::Ones,
                                     false);
    k_norm_ = &add_sharded_parameter("k_norm.weight", {k}, {k / tp.size}, Shard{1, k, 1, tp.rank, tp.size}, Init::Ones,
                                     false);
    norm_whole_ = true;
  }
  for (Layer* l : std::initializer_list<Layer*>{&attn_norm_, &qkv_, &o_, &mlp_norm_}) add_child(*l);
  if (s.moe.experts > 0) {
    // The experts replicated over tp: every slot routes the same tokens through every expert (a shared expert is split
    // as a dense MLP).
    moe_ = std::make_unique<MoeMlp>(child_name("moe"), s.moe, tp);
    add_child(*moe_);
    return;
  }
  gate_up_ = std::make_unique<Linear>(child_name("gate_up"), s.dim, 2 * s.intermediate, false, Split::Column, tp, 2);
  down_ = std::make_unique<Linear>(child_name("down"), s.intermediate, s.dim, false, Split::Row, tp);
  add_child(*gate_up_);
  add_child(*down_);
}

namespace {
// A sparse block's MoE MLP keeps what it saves in kGateUp's place.
enum BlockChild { kAttnNorm, kQkv, kO, kMlpNorm, kGateUp, kDown, kNumChildren };
}  // namespace

int LlamaBlock::add_lora(const LoraTargets& targets) {
  freeze();
  int added = 0;
  const char* qkv[] = {"q", "k", "v"};
  for (int p = 0; p < 3; ++p) added += qkv_.adapt(targets, p, qkv[p]);
  added += o_.adapt(targets, -1, "");
  if (moe_) return added + moe_->add_lora(targets);  // the shared expert's, where there is one
  added += gate_up_->adapt(targets, 0, "gate") + gate_up_->adapt(targets, 1, "up");
  added += down_->adapt(targets, -1, "");
  return added;
}

int LlamaBlock::use_fp8(const spec::Fp8Config& config) {
  int used = 0;
  for (Linear* l : {&qkv_, &o_, gate_up_.get(), down_.get()}) used += l && l->use_fp8(config) ? 1 : 0;
  return used;
}

int64_t LlamaBlock::mlp_tile(const Batch& batch, int64_t rows, DType dtype) const {
  // An adapter's dropout mask is keyed by its row's place in the micro-batch, which a tile's rows do not carry: such an
  // MLP runs whole.
  // A mixture of experts runs whole too.
  if (moe_ || gate_up_->has_dropout() || down_->has_dropout()) return rows;
  return mlp_tile_rows(batch.tiles.mlp_tokens, rows, down_->in_features(), dtype);
}

namespace {
// Runs `op` (ops::rotary_forward or its backward, in place) on the first `heads` heads of qkv (B, Tl, W) at its tokens'
// whole-sequence positions: `ring`, this shard's own tokens, one call per sequence and run of the split; else qkv holds
// every token in order (rows 0..T-1 of the tables).
void rotate(void (*op)(const Tensor&, const Tensor&, const Tensor&, int, const Tensor&), const Tensor& qkv,
            const Tensor& cos, const Tensor& sin, int heads, const ContextSplit& cp, bool ring) {
  if (!ring) return op(qkv, cos, sin, heads, qkv);
  const int64_t B = qkv.dim(0), Tl = qkv.dim(1), W = qkv.dim(2), half = cos.dim(1);
  for (int64_t b = 0; b < B; ++b)
    for (const ContextSplit::Run& r : cp.runs(Tl * cp.size)) {
      const Tensor rows = qkv.flat_slice((b * Tl + r.local) * W, r.count * W, {1, r.count, W});
      op(rows, cos.flat_slice(r.position * half, r.count * half, {r.count, half}),
         sin.flat_slice(r.position * half, r.count * half, {r.count, half}), heads, rows);
    }
}
}  // namespace

std::pair<int, int> LlamaBlock::attention_heads(const ContextSplit& cp) const {
  if (!cp.active() || cp.ring(heads_, kv_heads_)) return {heads_, kv_heads_};
  return {heads_ / cp.size, kv_heads_ * cp.kv_copies(kv_heads_) / cp.size};
}

Tensor LlamaBlock::forward(const Tensor& x, const Batch& batch, Saved& saved) { return run(x, batch, saved, true); }

Tensor LlamaBlock::forward_for_backward(const Tensor& x, const Batch& batch, Saved& saved) {
  return run(x, batch, saved, false);
}

Tensor LlamaBlock::run(const Tensor& x, const Batch& batch, Saved& saved, bool output) {
  // T: this shard's tokens of each sequence (all of them without context parallelism).
  const int64_t B = x.dim(0), T = x.dim(1), C = x.dim(2), N = B * T;
  Device& dev = x.device();
  const ContextSplit& cp = batch.context;
  saved.children.assign(kNumChildren, Saved{});
  // (B, T, (H + 2 Hkv) D / tp)
  Tensor qkv = qkv_.forward(attn_norm_.forward(x, saved.children[kAttnNorm]), batch, saved.children[kQkv]);
  const int64_t d = qkv.dim(2) / (heads_ + 2 * kv_heads_);
  // qk_norm's input and its (rows, H + Hkv) rstd (2 when whole), kept for backward. A whole q and k (OLMoE) are
  // normalised over every head of a token, which a shard holds only before the regrouping: there, on its own tokens.
  Tensor raw, rstd;
  if (norm_whole_) qkv = head_norm(qkv, 1, 1, raw, rstd);
  // Under context parallelism by heads attention sees every token of 1 / cp of this slot's heads: (B, cp T, (H + 2 r
  // Hkv) D / (tp cp)), in position order, so the rotation below is the one-device rotation of those heads (r: the
  // copies of each kv head where the slot has fewer than cp, nn/context_split.h). By a ring it keeps this shard's
  // tokens of every head, rotated at their places in the sequence (nn/ring_attention.h).
  const bool ring = cp.ring(heads_, kv_heads_);
  if (cp.active() && !ring) qkv = cp.gather_qkv(qkv, heads_, kv_heads_);
  const auto [heads, kv_heads] = attention_heads(cp);
  const int64_t Ta = qkv.dim(1);                                                  // the tokens attention sees
  if (q_norm_ && !norm_whole_) qkv = head_norm(qkv, heads, kv_heads, raw, rstd);  // each head on its own
  // q and k rotated in place, v passed over.
  rotate(ops::rotary_forward, qkv, rope_->cos(dev), rope_->sin(dev), heads + kv_heads, cp, ring);
  Tensor att, lse;  // (B, Ta, H D / tp), (B, H / tp, Ta): the first forward's, when it kept them for this one
  if (!kept_attention(saved, att, lse)) {
    att = Tensor::empty({B, Ta, heads * d}, x.dtype(), dev, name() + " attention output");
    lse = Tensor::empty({B, heads, Ta}, DType::F32, dev, name() + " attention lse");
    const Tensor& documents = batch.documents;  // (B, T) of the whole sequences, or none
    if (ring)
      ring_attention_forward(cp, qkv, heads, kv_heads, documents, att, lse);
    else if (documents.defined())
      ops::attention_gqa_documents_forward(qkv, heads, kv_heads, documents, att, lse);
    else
      ops::attention_gqa_forward(qkv, heads, kv_heads, att, lse, batch.tiles.attention_block_bytes);
    keep_attention(batch, att, lse, saved);
  }
  // (B, T, H D / tp): this shard's tokens of every head again
  const Tensor att_rows = cp.active() && !ring ? cp.scatter_sequence(att, {heads_ * d}) : att;
  Tensor x1 = o_.forward_add(att_rows, x, batch, saved.children[kO]);  // (B, T, C): x + o(att), one pass
  if (moe_) {
    // Only a first forward adds to the balance sums; activation checkpointing's second keeps what backward reads.
    Tensor y = moe_->forward_add(mlp_norm_.forward(x1, saved.children[kMlpNorm]), x1, batch, saved.children[kGateUp],
                                 output);  // (B, T, C)
    saved.tensors = {qkv, att, lse, Tensor(), raw, rstd};
    return y;
  }
  const int64_t tile = mlp_tile(batch, N, x.dtype());
  if (tile >= N) {
    // (B, T, 2F / tp): gate | up of this slot's F / tp columns
    Tensor gate_up = gate_up_->forward(mlp_norm_.forward(x1, saved.children[kMlpNorm]), batch, saved.children[kGateUp]);
    Tensor h = Tensor::empty({B, T, gate_up.dim(2) / 2}, x.dtype(), dev, name() + " swiglu output");  // (B, T, F / tp)
    ops::swiglu_forward(gate_up, h);
    Tensor y = down_->forward_add(h, x1, batch, saved.children[kDown]);  // (B, T, C): x1 + down(h)
    saved.tensors = {qkv, att, lse, gate_up, raw, rstd};
    return y;
  }
  // The MLP in tiles of rows, keeping only its input: the backward recomputes each tile's intermediates before its
  // gradient, so at most one tile's are held (and activation checkpointing's second forward need not run it at all).
  saved.tensors = {qkv, att, lse, x1, raw, rstd};
  if (!output) return Tensor();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev, name() + " output");  // (B, T, C)
  const Tensor rows = x1.view({N, C}), out = y.view({N, C});
  for (int64_t r0 = 0; r0 < N; r0 += tile) {
    const int64_t n = std::min(tile, N - r0);
    Saved norm, up, down;
    Tensor gate_up;  // (n, 2F / tp)
    const Tensor h = mlp_tile_up(rows.rows(r0, n), norm, up, gate_up);
    out.rows(r0, n).copy_from(down_->forward_add(h, rows.rows(r0, n), down));  // x1 + down(h)
  }
  return y;
}

Tensor LlamaBlock::mlp_tile_up(const Tensor& x1, Saved& norm, Saved& up, Tensor& gate_up) {
  gate_up = gate_up_->forward(mlp_norm_.forward(x1, norm), up);  // (n, 2F / tp)
  Tensor h = Tensor::empty({x1.dim(0), gate_up.dim(1) / 2}, x1.dtype(), x1.device(), name() + " swiglu output");
  ops::swiglu_forward(gate_up, h);
  return h;  // (n, F / tp)
}

Tensor LlamaBlock::mlp_backward(const Tensor& dy, const Batch& batch, Saved& saved) {
  const int64_t C = dy.dim(-1), N = dy.numel() / C;
  if (moe_)  // (B, T, C): dy + mlp_norm'(moe'(dy))
    return mlp_norm_.backward_add(moe_->backward(dy, batch, saved.children[kGateUp]), dy, saved.children[kMlpNorm]);
  const int64_t tile = mlp_tile(batch, N, dy.dtype());
  if (tile >= N) {
    // dx1 = dy + mlp_norm'(gate_up'(swiglu'(down'(dy)))); the SwiGLU gradient overwrites gate_up, which nothing
    // reads after it.
    const Tensor gate_up = saved.tensors.at(3);
    Tensor dh = down_->backward(dy, batch, saved.children[kDown]);
    ops::swiglu_backward(gate_up, dh, gate_up);
    // (B, T, C): dy + mlp_norm'(g), one pass
    return mlp_norm_.backward_add(gate_up_->backward(gate_up, batch, saved.children[kGateUp]), dy,
                                  saved.children[kMlpNorm]);
  }
  const Tensor x1 = saved.tensors.at(3);  // (B, T, C)
  Device& dev = dy.device();
  Tensor dx1 = Tensor::empty(x1.shape(), x1.dtype(), dev, name() + " mlp input grad");  // (B, T, C)
  const Tensor rows = x1.view({N, C}), grads = dy.view({N, C}), out = dx1.view({N, C});
  for (int64_t r0 = 0; r0 < N; r0 += tile) {
    const int64_t n = std::min(tile, N - r0);
    Saved norm, up, down;
    Tensor gate_up;  // (n, 2F / tp)
    down_->forward(mlp_tile_up(rows.rows(r0, n), norm, up, gate_up),
                   down);                                        // what down's backward needs, not its output
    const Tensor dh = down_->backward(grads.rows(r0, n), down);  // (n, F / tp)
    ops::swiglu_backward(gate_up, dh, gate_up);
    out.rows(r0, n).copy_from(mlp_norm_.backward_add(gate_up_->backward(gate_up, up), grads.rows(r0, n), norm));
  }
  return dx1;
}

Tensor LlamaBlock::backward(const Tensor& dy, const Batch& batch, Saved& saved) {
  // qkv, att and lse as attention saw them: every token of this shard's heads under context parallelism.
  const Tensor qkv = saved.tensors.at(0), att = saved.tensors.at(1), lse = saved.tensors.at(2);
  const Tensor raw = saved.tensors.at(4), rstd = saved.tensors.at(5);  // qk_norm's, or undefined
  Device& dev = dy.device();
  const ContextSplit& cp = batch.context;
  const bool ring = cp.ring(heads_, kv_heads_);
  const auto [heads, kv_heads] = attention_heads(cp);
  const int64_t d = att.dim(2) / heads;
  Tensor dx1 = mlp_backward(dy, batch, saved);  // (B, T, C)
  // Attention branch: dx = dx1 + attn_norm'(qkv'(head_norm'(rope'(attention'(o'(dx1)))))), the rotation and the head
  // norm (with qk_norm) undone in place.
  Tensor datt = o_.backward(dx1, batch, saved.children[kO]);  // (B, T, H D / tp)
  if (cp.active() && !ring) datt = cp.gather_sequence(datt, {heads_ * d});
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), dev, name() + " qkv grad");  // (B, Ta, (H + 2 Hkv) D / tp)
  const Tensor& documents = batch.documents;  // (B, T) of the whole sequences, or none
  if (ring)
    ring_attention_backward(cp, qkv, heads, kv_heads, documents, att, lse, datt, dqkv);
  else if (documents.defined())
    ops::attention_gqa_documents_backward(qkv, heads, kv_heads, documents, att, lse, datt, dqkv);
  else
    ops::attention_gqa_backward(qkv, heads, kv_heads, att, lse, datt, dqkv, batch.tiles.attention_block_bytes);
  saved.tensors.clear();
  datt = Tensor();
  rotate(ops::rotary_backward, dqkv, rope_->cos(dev), rope_->sin(dev), heads + kv_heads, cp, ring);
  if (q_norm_ && !norm_whole_) head_norm_backward(dqkv, raw, rstd, heads, kv_heads);
  if (cp.active() && !ring) dqkv = cp.scatter_qkv(dqkv, heads_, kv_heads_);  // (B, T, (H + 2 Hkv) D / tp)
  if (norm_whole_) head_norm_backward(dqkv, raw, rstd, 1, 1);                // on this shard's own tokens, as forward
  Tensor dx = attn_norm_.backward_add(qkv_.backward(dqkv, batch, saved.children[kQkv]), dx1, saved.children[kAttnNorm]);
  saved.clear();
  return dx;
}

Tensor LlamaBlock::whole_sums(const Tensor& a, const Tensor& b, const Tensor& q_gain, const Tensor& k_gain) const {
  if (!norm_whole_ || !tp_.active()) return Tensor();
  Tensor sums = Tensor::empty({a.dim(0) * a.dim(1), 2}, DType::F32, a.device(), name() + " head norm sums");
  ops::head_norm_sums(a, b, q_gain, k_gain, 1, 1, q_norm_->value.dim(0), sums);  // this slot's heads
  tp_.sum(sums);                                                                 // every slot's
  return sums;
}

int64_t LlamaBlock::whole_width(const Tensor& sums) const {
  return sums.defined() ? q_norm_->value.dim(0) * tp_.size : 0;
}

Tensor LlamaBlock::head_norm(const Tensor& qkv, int heads, int kv_heads, Tensor& raw, Tensor& rstd) const {
  const int64_t rows = qkv.dim(0) * qkv.dim(1);
  Device& dev = qkv.device();
  raw = qkv;
  Tensor normed = Tensor::empty(qkv.shape(), qkv.dtype(), dev, name() + " normed qkv");  // (B, T, (H + 2 Hkv) D)
  rstd = Tensor::empty({rows, heads + kv_heads}, DType::F32, dev, name() + " head norm rstd");
  const Tensor sums = whole_sums(raw, raw, Tensor(), Tensor());  // (rows, 2) of x^2, or none
  ops::head_norm_forward(raw, q_norm_->value, k_norm_->value, heads, kv_heads, normed, rstd, eps_, sums,
                         whole_width(sums));
  return normed;
}

void LlamaBlock::head_norm_backward(const Tensor& dqkv, const Tensor& raw, const Tensor& rstd, int heads,
                                    int kv_heads) {
  Device& dev = dqkv.device();
  Tensor dq = gradient_or_sink(*q_norm_, dev), dk = gradient_or_sink(*k_norm_, dev);  // f32, accumulate
  // Per head, each slot normalises its own heads with the one gain of all: its gains' gradients are partial sums over
  // tp, joined here before they add to what the gradients hold (a frozen gain's sink is dropped, so it needs none).
  // Whole, each slot's gains are its own part, their gradients its own.
  const bool join = tp_.active() && !norm_whole_ && q_norm_->trainable;
  const Tensor dq_part = join ? Tensor::zeros(dq.shape(), DType::F32, dev, name() + " q_norm grad part") : dq;
  const Tensor dk_part = join ? Tensor::zeros(dk.shape(), DType::F32, dev, name() + " k_norm grad part") : dk;
  // (rows, 2) of dy * gain * x, or none; before dqkv is overwritten
  const Tensor sums = whole_sums(dqkv, raw, q_norm_->value, k_norm_->value);
  ops::head_norm_backward(dqkv, raw, q_norm_->value, k_norm_->value, heads, kv_heads, rstd, dqkv, dq_part, dk_part,
                          sums, whole_width(sums));
  if (!join) return;
  tp_.sum(dq_part);
  tp_.sum(dk_part);
  ops::axpy(1.0f, dq_part, dq);
  ops::axpy(1.0f, dk_part, dk);
}

LlamaHead::LlamaHead(int64_t dim, int64_t vocab_size, float eps, TpSlot tp, bool tied)
    : Layer(""),
      norm_("norm", dim, eps),
      head_("head", dim, vocab_size, false, Split::Column, tp, 1, tied ? "embed.weight" : "") {
  add_child(norm_);
  add_child(head_);
}

Tensor LlamaHead::forward(const Tensor& x, const Batch& batch, Saved& saved) {
  saved.children.assign(2, Saved{});
  return head_forward(head_, norm_.forward(x, saved.children[0]), batch, saved);
}

Tensor LlamaHead::backward(const Tensor& dy, const Batch& batch, Saved& saved) {
  Tensor dx = norm_.backward(head_backward(head_, dy, batch, saved), saved.children[0]);  // (B, T, C)
  saved.clear();
  return dx;
}

}  // namespace tandem::nn
