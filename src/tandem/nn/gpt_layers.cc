#include "tandem/nn/gpt_layers.h"

#include "tandem/nn/loss.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {

GptEmbedding::GptEmbedding(int64_t vocab_size, int64_t max_seq_len, int64_t dim, TpSlot tp)
    : Layer(""), vocab_(vocab_size), max_seq_(max_seq_len), dim_(dim), tp_(tp) {
  TANDEM_CHECK(vocab_ % tp.size == 0, "vocabulary ", vocab_, " over ", tp.size, " slots");
  wte_ = &add_sharded_parameter("wte.weight", {vocab_, dim_}, {vocab_ / tp.size, dim_},
                                Shard{1, vocab_, dim_, tp.rank, tp.size}, Init::Normal, true);
  wpe_ = &add_parameter("wpe.weight", {max_seq_, dim_}, Init::Normal, true);
}

Tensor GptEmbedding::forward(const Tensor& tokens, Saved& saved) {
  TANDEM_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::I32, "embedding expects (B, T) i32 tokens, got ",
               shape_str(tokens.shape()));
  const int64_t B = tokens.dim(0), T = tokens.dim(1);
  if (T > max_seq_) TANDEM_FAIL("sequence of ", T, " tokens is longer than the model's seq_len ", max_seq_);
  Tensor x = Tensor::empty({B, T, dim_}, wte_->value.dtype(), tokens.device(), "embedding output");  // (B, T, C)
  const int64_t start = tp_.rank * (vocab_ / tp_.size);
  ops::embedding_forward(tokens.view({B * T}), wte_->value, x.view({B * T, dim_}), start, vocab_);
  tp_.sum(x);
  ops::add_positions(x, wpe_->value);
  saved.tensors = {tokens};
  return x;
}

Tensor GptEmbedding::backward(const Tensor& dy, Saved& saved) {
  const Tensor tokens = saved.tensors.at(0);  // (B, T)
  const int64_t start = tp_.rank * (vocab_ / tp_.size);
  if (wte_->trainable)
    ops::embedding_backward(tokens.view({tokens.numel()}), dy.view({tokens.numel(), dim_}), wte_->grad, start);
  if (wpe_->trainable) ops::add_positions_backward(dy, wpe_->grad);
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
  const int64_t B = x.dim(0), T = x.dim(1);
  saved.children.assign(kNumChildren, Saved{});
  Tensor qkv = qkv_.forward(ln1_.forward(x, saved.children[kLn1]), batch, saved.children[kQkv]);  // (B, T, 3C / tp)
  const int64_t c_local = qkv.dim(2) / 3;
  Tensor att = Tensor::empty({B, T, c_local}, x.dtype(), x.device(), name() + " attention output");  // (B, T, C/tp)
  Tensor lse = Tensor::empty({B, heads_, T}, DType::F32, x.device(), name() + " attention lse");     // (B, H, T)
  const Tensor& documents = batch.documents;                                                         // (B, T) or none
  if (documents.defined())
    ops::attention_gqa_documents_forward(qkv, heads_, heads_, documents, att, lse);  // multi-head: Hkv = H
  else
    ops::attention_forward(qkv, heads_, att, lse);
  Tensor x1 = proj_.forward_add(att, x, batch, saved.children[kProj]);  // (B, T, C): x + proj(att), one pass
  Tensor h = fc_.forward(ln2_.forward(x1, saved.children[kLn2]), batch, saved.children[kFc]);  // (B, T, 4C)
  h = gelu_.forward(h, saved.children[kGelu]);
  Tensor y = out_.forward_add(h, x1, batch, saved.children[kOut]);  // (B, T, C): x1 + out(h)
  saved.tensors = {qkv, att, lse};
  return y;
}

Tensor GptBlock::backward(const Tensor& dy, const Batch& batch, Saved& saved) {
  const Tensor qkv = saved.tensors.at(0), att = saved.tensors.at(1), lse = saved.tensors.at(2);
  // MLP branch: dx1 = dy + ln2'(fc'(gelu'(out'(dy))))
  Tensor g = out_.backward(dy, batch, saved.children[kOut]);
  g = gelu_.backward(g, saved.children[kGelu]);
  g = fc_.backward(g, batch, saved.children[kFc]);
  Tensor dx1 = ln2_.backward_add(g, dy, saved.children[kLn2]);  // (B, T, C): dy + ln2'(g), one pass
  // Attention branch: dx = dx1 + ln1'(qkv'(attention'(proj'(dx1))))
  Tensor datt = proj_.backward(dx1, batch, saved.children[kProj]);                            // (B, T, C)
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device(), name() + " qkv grad");  // (B, T, 3C)
  const Tensor& documents = batch.documents;                                                  // (B, T) or none
  if (documents.defined())
    ops::attention_gqa_documents_backward(qkv, heads_, heads_, documents, att, lse, datt, dqkv);
  else
    ops::attention_backward(qkv, heads_, att, lse, datt, dqkv);
  saved.tensors.clear();
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
