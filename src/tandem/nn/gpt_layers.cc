#include "tandem/nn/gpt_layers.h"

#include "tandem/nn/loss.h"
#include "tandem/nn/ring_attention.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {

GptEmbedding::GptEmbedding(int64_t vocab_size, int64_t max_seq_len, int64_t dim, TpSlot tp)
    : Layer(""), vocab_(vocab_size), max_seq_(max_seq_len), dim_(dim), tp_(tp) {
  TANDEM_CHECK(vocab_ % tp.size == 0, "vocabulary ", vocab_, " over ", tp.size, " slots");
  wte_ = &add_sharded_parameter("wte.weight", {vocab_, dim_}, {vocab_ / tp.size, dim_},
                                Shard{1, vocab_, dim_, tp.rank, tp.size}, Init::Normal, true);
  wpe_ = &add_parameter("wpe.weight", {max_seq_, dim_}, Init::Normal, true);
}

namespace {
// Runs `op` (ops::add_positions or its backward) on x (B, Tl, C) and the position table's rows (T_max, C) of this
// shard's tokens' whole-sequence positions (the split's runs; all T in order without context parallelism): one call per
// sequence and run under cp, so each row is added, and each row of the table's gradient summed over its batch, as on
// one device; the table's rows of other shards' positions stay as they are (the gradients' sum over dp x cp completes
// them).
void at_shard_positions(void (*op)(const Tensor&, const Tensor&), const Tensor& x, const Tensor& table,
                        const ContextSplit& cp) {
  if (!cp.active()) return op(x, table);
  const int64_t B = x.dim(0), Tl = x.dim(1), C = x.dim(2);
  for (int64_t b = 0; b < B; ++b)
    for (const ContextSplit::Run& r : cp.runs(Tl * cp.size))
      op(x.flat_slice((b * Tl + r.local) * C, r.count * C, {1, r.count, C}),
         table.flat_slice(r.position * C, r.count * C, {r.count, C}));
}
}  // namespace

Tensor GptEmbedding::forward(const Tensor& tokens, const Batch& batch, Saved& saved) {
  TANDEM_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::I32, "embedding expects (B, T) i32 tokens, got ",
               shape_str(tokens.shape()));
  const int64_t B = tokens.dim(0), T = tokens.dim(1);  // T: this shard's tokens of each sequence
  const ContextSplit& cp = batch.context;
  if (T * cp.size > max_seq_)
    TANDEM_FAIL("sequence of ", T * cp.size, " tokens is longer than the model's seq_len ", max_seq_);
  Tensor x = Tensor::empty({B, T, dim_}, wte_->value.dtype(), tokens.device(), "embedding output");  // (B, T, C)
  const int64_t start = tp_.rank * (vocab_ / tp_.size);
  ops::embedding_forward(tokens.view({B * T}), wte_->value, x.view({B * T, dim_}), start, vocab_);
  tp_.sum(x);
  at_shard_positions(ops::add_positions, x, wpe_->value, cp);
  saved.tensors = {tokens};
  return x;
}

Tensor GptEmbedding::backward(const Tensor& dy, const Batch& batch, Saved& saved) {
  const Tensor tokens = saved.tensors.at(0);  // (B, T)
  const int64_t start = tp_.rank * (vocab_ / tp_.size);
  if (wte_->trainable)
    ops::embedding_backward(tokens.view({tokens.numel()}), dy.view({tokens.numel(), dim_}), wte_->grad, start);
  if (wpe_->trainable) at_shard_positions(ops::add_positions_backward, dy, wpe_->grad, batch.context);
  saved.clear();
  return Tensor();
}

GptBlock::GptBlock(int index, int64_t dim, int heads, TpSlot tp)
    : Layer("blocks." + std::to_string(index)),
      heads_(heads / tp.size),
      ln1_(child_name("ln1"), dim),
      qkv_(child_name("qkv"), dim, 3 * dim, true, Split::Column, tp, 3),
      proj_(child_name("proj"), dim, dim, true, Split::Row, tp),
      ln2_(child_name("ln2"), dim),
      fc_(child_name("fc"), dim, 4 * dim, true, Split::Column, tp),
      gelu_(child_name("gelu"), ActivationKind::Gelu, fc_.defer_bias()),  // fc's bias added in the GELU's pass
      out_(child_name("out"), 4 * dim, dim, true, Split::Row, tp) {
  TANDEM_CHECK(heads > 0 && dim % heads == 0, "dim ", dim, " is not a multiple of heads ", heads);
  TANDEM_CHECK(heads % tp.size == 0, "heads ", heads, " over ", tp.size, " tensor-parallel slots");
  for (Layer* l : std::initializer_list<Layer*>{&ln1_, &qkv_, &proj_, &ln2_, &fc_, &gelu_, &out_}) add_child(*l);
}

namespace {
enum BlockChild { kLn1, kQkv, kProj, kLn2, kFc, kGelu, kOut, kNumChildren };
}

int GptBlock::add_lora(const LoraTargets& targets) {
  freeze();
  int added = 0;
  for (Linear* l : {&qkv_, &proj_, &fc_, &out_})
    if (targets.sites.count(l->name())) {
      l->add_lora(targets.options, -1, "");
      ++added;
    }
  return added;
}

int GptBlock::use_fp8(const spec::Fp8Config& config) {
  int used = 0;
  for (Linear* l : {&qkv_, &proj_, &fc_, &out_}) used += l->use_fp8(config) ? 1 : 0;
  return used;
}

Tensor GptBlock::forward(const Tensor& x, const Batch& batch, Saved& saved) {
  const int64_t B = x.dim(0);  // x (B, T, C): T this shard's tokens of each sequence
  saved.children.assign(kNumChildren, Saved{});
  Tensor qkv = qkv_.forward(ln1_.forward(x, saved.children[kLn1]), batch, saved.children[kQkv]);  // (B, T, 3C / tp)
  const int64_t c_local = qkv.dim(2) / 3;
  // Under context parallelism by heads attention sees every token of 1 / cp of this slot's heads: (B, cp T, 3C / (tp
  // cp)); by a ring this shard's tokens of every head (nn/ring_attention.h).
  const ContextSplit& cp = batch.context;
  const bool ring = cp.ring(heads_, heads_);
  if (cp.active() && !ring) qkv = cp.gather_sequence(qkv, {c_local, c_local, c_local});
  const int heads = ring ? heads_ : heads_ / cp.size;
  const int64_t Ta = qkv.dim(1);  // the tokens attention sees
  Tensor att, lse;                // (B, Ta, C / tp), (B, H, Ta): the first forward's, when it kept them for this one
  if (!kept_attention(saved, att, lse)) {
    att = Tensor::empty({B, Ta, heads * (c_local / heads_)}, x.dtype(), x.device(), name() + " attention output");
    lse = Tensor::empty({B, heads, Ta}, DType::F32, x.device(), name() + " attention lse");
    const Tensor& documents = batch.documents;  // (B, T) of the whole sequences, or none
    if (ring)
      ring_attention_forward(cp, qkv, heads, heads, documents, att, lse);  // multi-head: Hkv = H
    else if (documents.defined())
      ops::attention_gqa_documents_forward(qkv, heads, heads, documents, att, lse);  // multi-head: Hkv = H
    else
      ops::attention_forward(qkv, heads, att, lse, batch.tiles.attention_block_bytes);
    keep_attention(batch, att, lse, saved);
  }
  // (B, T, C / tp): this shard's tokens of every head again
  const Tensor att_rows = cp.active() && !ring ? cp.scatter_sequence(att, {c_local}) : att;
  Tensor x1 = proj_.forward_add(att_rows, x, batch, saved.children[kProj]);  // (B, T, C): x + proj(att), one pass
  Tensor h = fc_.forward(ln2_.forward(x1, saved.children[kLn2]), batch, saved.children[kFc]);  // (B, T, 4C)
  h = gelu_.forward(h, saved.children[kGelu]);
  Tensor y = out_.forward_add(h, x1, batch, saved.children[kOut]);  // (B, T, C): x1 + out(h)
  saved.tensors = {qkv, att, lse};
  return y;
}

Tensor GptBlock::backward(const Tensor& dy, const Batch& batch, Saved& saved) {
  // qkv, att and lse as attention saw them: every token of this shard's heads under context parallelism.
  const Tensor qkv = saved.tensors.at(0), att = saved.tensors.at(1), lse = saved.tensors.at(2);
  const ContextSplit& cp = batch.context;
  const bool ring = cp.ring(heads_, heads_);
  const int heads = ring ? heads_ : heads_ / cp.size;
  // MLP branch: dx1 = dy + ln2'(fc'(gelu'(out'(dy))))
  Tensor g = out_.backward(dy, batch, saved.children[kOut]);
  g = gelu_.backward(g, saved.children[kGelu]);
  g = fc_.backward(g, batch, saved.children[kFc]);
  Tensor dx1 = ln2_.backward_add(g, dy, saved.children[kLn2]);  // (B, T, C): dy + ln2'(g), one pass
  // Attention branch: dx = dx1 + ln1'(qkv'(attention'(proj'(dx1))))
  Tensor datt = proj_.backward(dx1, batch, saved.children[kProj]);  // (B, T, C / tp)
  if (cp.active() && !ring) datt = cp.gather_sequence(datt, {datt.dim(2)});
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device(), name() + " qkv grad");  // (B, Ta, 3C / tp)
  const Tensor& documents = batch.documents;  // (B, T) of the whole sequences, or none
  if (ring)
    ring_attention_backward(cp, qkv, heads, heads, documents, att, lse, datt, dqkv);
  else if (documents.defined())
    ops::attention_gqa_documents_backward(qkv, heads, heads, documents, att, lse, datt, dqkv);
  else
    ops::attention_backward(qkv, heads, att, lse, datt, dqkv, batch.tiles.attention_block_bytes);
  saved.tensors.clear();
  datt = Tensor();
  if (cp.active() && !ring) {  // (B, T, 3C / tp): this shard's tokens of q | k | v of every head
    const int64_t c_local = dqkv.dim(2) / 3 * cp.size;
    dqkv = cp.scatter_sequence(dqkv, {c_local, c_local, c_local});
  }
  Tensor dx = ln1_.backward_add(qkv_.backward(dqkv, batch, saved.children[kQkv]), dx1, saved.children[kLn1]);
  saved.clear();
  return dx;
}

GptHead::GptHead(int64_t dim, int64_t vocab_size, TpSlot tp, bool tied)
    : Layer(""),
      lnf_("lnf", dim),
      head_("head", dim, vocab_size, false, Split::Column, tp, 1, tied ? "wte.weight" : "") {
  add_child(lnf_);
  add_child(head_);
}

Tensor GptHead::forward(const Tensor& x, const Batch& batch, Saved& saved) {
  saved.children.assign(2, Saved{});
  return head_forward(head_, lnf_.forward(x, saved.children[0]), batch, saved);
}

Tensor GptHead::backward(const Tensor& dy, const Batch& batch, Saved& saved) {
  Tensor dx = lnf_.backward(head_backward(head_, dy, batch, saved), saved.children[0]);  // (B, T, C)
  saved.clear();
  return dx;
}

}  // namespace tandem::nn
