#include "tandem/plan/shadow.h"

#include <algorithm>

#include "tandem/ops/op_util.h"

namespace tandem::plan::shadow {

void Tracker::allocate(int64_t bytes, Term term) {
  live_[term] += bytes;
  live_total_ += bytes;
  allocated_total_ += bytes;
  ++allocations_;
  max_live_[term] = std::max(max_live_[term], live_[term]);
  if (live_total_ > peak_) {
    peak_ = live_total_;
    at_peak_ = live_;
    peak_where_ = where_;
  }
}

void Tracker::release(int64_t bytes, Term term) {
  live_[term] -= bytes;
  live_total_ -= bytes;
}

void Tracker::reset_peak() {
  peak_ = live_total_;
  at_peak_ = live_;
  peak_where_ = where_;
}

Sym::Sym(Tracker& tracker, Shape shape, int elem_bytes, Term term) : shape_(std::move(shape)) {
  if (tracker.recomputing && term == Term::Activations) term = Term::Transient;
  const int64_t bytes = shape_numel(shape_) * elem_bytes;
  tracker.allocate(bytes, term);
  storage_ = std::make_shared<Storage>(&tracker, bytes, term);
}

Sym Sym::view(Shape shape) const {
  Sym v = *this;
  v.shape_ = std::move(shape);
  return v;
}

void Context::scratch(int64_t bytes) const {
  tracker->allocate(bytes, Term::Transient);
  tracker->release(bytes, Term::Transient);
}

int cpu_attention_teams(int64_t b, int64_t t, int64_t h, int64_t d, int threads) {
  // ops/cpu/attention.cc, plan_of(): rows per product kept under OpenBLAS's threading threshold, and a team of
  // threads over (batch, head) pairs only when the products stay serial and the work pays for the fork.
  constexpr int64_t kBlasSerialLimit = int64_t{1} << 18, kMinBlockRows = 16;
  const int64_t pairs = b * h;
  if (pairs == 0 || t == 0 || d == 0) return 0;
  const int64_t block = std::min(t, std::max(kMinBlockRows, kBlasSerialLimit / (t * d)));
  const bool serial_blas = block * t * d <= kBlasSerialLimit;
  const bool parallel = serial_blas && pairs > 1 && ops::worth_parallel(pairs * t * t, d);
  return parallel ? static_cast<int>(std::min<int64_t>(threads, pairs)) : 1;
}

namespace {

// ops/cpu/gemm.cc: a 16-bit operand is widened into fp32 scratch for OpenBLAS, and a 16-bit output is formed in
// fp32 scratch; all three live through the product. cuBLASLt works in place (its workspace is fixed).
void matmul_scratch(const Context& c, int64_t a_numel, int64_t b_numel, int64_t c_numel, bool c_is_f32) {
  if (c.backend != Backend::Cpu || c.act_bytes == 4) return;
  c.scratch((a_numel + b_numel + (c_is_f32 ? 0 : c_numel)) * 4);
}

// nn::Linear::forward: y (..., out) = x W^T + b; saves x.
Sym linear_forward(const Context& c, const Sym& x, SymSaved& saved, int64_t in, int64_t out, Term out_term) {
  Shape ys = x.shape();
  ys.back() = out;
  Sym y = c.act(ys, out_term);
  matmul_scratch(c, x.numel(), in * out, y.numel(), false);
  saved.tensors = {x};
  return y;
}

// nn::Linear::backward: dW += dy^T x, then dx (..., in) = dy W; x goes when the local copy does.
Sym linear_backward(const Context& c, const Sym& dy, SymSaved& saved, int64_t in, int64_t out) {
  const Sym x = saved.tensors.at(0);
  matmul_scratch(c, dy.numel(), x.numel(), in * out, true);
  Sym dx = c.act(x.shape(), Term::Transient);
  matmul_scratch(c, dy.numel(), in * out, dx.numel(), false);
  saved.clear();
  return dx;
}

// nn::LayerNorm::forward: y, mean (N) and rstd (N) f32; saves x, mean, rstd.
Sym layernorm_forward(const Context& c, const Sym& x, SymSaved& saved, Term out_term) {
  const int64_t rows = x.numel() / x.dim(-1);
  Sym y = c.act(x.shape(), out_term);
  Sym mean = c.f32({rows}, Term::Activations);
  Sym rstd = c.f32({rows}, Term::Activations);
  saved.tensors = {x, mean, rstd};
  return y;
}

// nn::LayerNorm::backward and nn::Activation::backward: dx shaped like the saved input x, then the saved go.
Sym input_shaped_backward(const Context& c, const Sym& dy, SymSaved& saved) {
  const Sym x = saved.tensors.at(0);
  Sym dx = c.act(x.shape(), Term::Transient);
  saved.clear();
  return dx;
}

// nn::Activation::forward: y; saves x (backward: input_shaped_backward).
Sym activation_forward(const Context& c, const Sym& x, SymSaved& saved, Term out_term) {
  Sym y = c.act(x.shape(), out_term);
  saved.tensors = {x};
  return y;
}

// nn::GptEmbedding: tokens (B, T) -> x (B, T, C); saves the tokens. Backward scatters into the flat gradient.
Sym embedding_forward(const Context& c, const LayerInfo& l, const Sym& tokens, SymSaved& saved, Term out_term) {
  Sym x = c.act({tokens.dim(0), tokens.dim(1), l.dim}, out_term);
  saved.tensors = {tokens};
  return x;
}

Sym embedding_backward(const Context& c, const Sym& dy, SymSaved& saved) {
  const Sym tokens = saved.tensors.at(0);
  // ops/cuda/embedding.cu sorts the ids: keys, positions in and out (3, N) i32 (its CUB temp is not counted).
  if (c.backend == Backend::Cuda) c.scratch(3 * tokens.numel() * 4);
  saved.clear();
  return Sym();
}

enum BlockChild { kLn1, kQkv, kProj, kLn2, kFc, kGelu, kOut, kNumChildren };

void attention_scratch(const Context& c, const LayerInfo& l, int64_t b, int64_t t, bool backward) {
  const int64_t d = l.dim_local / l.heads;  // head dim D = C / H = C_local / H_local
  if (c.backend == Backend::Cpu) {
    // ops/cpu/attention.cc: per thread (4TD + TT) floats forward, (8TD + 2TT + T) backward.
    const int64_t teams = cpu_attention_teams(b, t, l.heads, d, c.cpu_threads);
    const int64_t per_thread = backward ? 8 * t * d + 2 * t * t + t : 4 * t * d + t * t;
    c.scratch(teams * per_thread * 4);
  } else if (backward) {
    // ops/cuda/attention.cu: rowsum(dO * O) (B, H, T) f32. cuDNN's workspace is not counted.
    c.scratch(b * l.heads * t * 4);
  }
}

// nn::GptBlock::forward: x + attn(ln1(x)), then + mlp(ln2(.)); saves qkv, att, lse and the children's.
Sym block_forward(const Context& c, const LayerInfo& l, const Sym& x, SymSaved& saved, Term out_term) {
  const int64_t B = x.dim(0), T = x.dim(1), C = l.dim, Cl = l.dim_local;
  saved.children.assign(kNumChildren, SymSaved{});
  Sym qkv = linear_forward(c, layernorm_forward(c, x, saved.children[kLn1], Term::Activations), saved.children[kQkv], C,
                           3 * Cl, Term::Activations);  // (B, T, 3C/tp)
  Sym att = c.act({B, T, Cl}, Term::Activations);       // (B, T, C/tp)
  Sym lse = c.f32({B, l.heads, T}, Term::Activations);  // (B, H, T)
  attention_scratch(c, l, B, T, false);
  Sym x1 = linear_forward(c, att, saved.children[kProj], Cl, C, Term::Activations);  // (B, T, C)
  Sym h = linear_forward(c, layernorm_forward(c, x1, saved.children[kLn2], Term::Activations), saved.children[kFc], C,
                         4 * Cl, Term::Activations);  // (B, T, 4C/tp)
  h = activation_forward(c, h, saved.children[kGelu], Term::Activations);
  Sym y = linear_forward(c, h, saved.children[kOut], 4 * Cl, C, out_term);  // (B, T, C)
  saved.tensors = {qkv, att, lse};
  return y;
}

// nn::GptBlock::backward. Note `g` (the MLP branch's input gradient) lives to the end, as in the code.
Sym block_backward(const Context& c, const LayerInfo& l, const Sym& dy, SymSaved& saved) {
  const int64_t C = l.dim, Cl = l.dim_local;
  const Sym qkv = saved.tensors.at(0), att = saved.tensors.at(1), lse = saved.tensors.at(2);
  Sym g = linear_backward(c, dy, saved.children[kOut], 4 * Cl, C);
  g = input_shaped_backward(c, g, saved.children[kGelu]);
  g = linear_backward(c, g, saved.children[kFc], C, 4 * Cl);
  Sym dx1 = input_shaped_backward(c, g, saved.children[kLn2]);
  Sym datt = linear_backward(c, dx1, saved.children[kProj], Cl, C);
  Sym dqkv = c.act(qkv.shape(), Term::Transient);
  attention_scratch(c, l, qkv.dim(0), qkv.dim(1), true);
  saved.tensors.clear();
  Sym dx = input_shaped_backward(c, linear_backward(c, dqkv, saved.children[kQkv], C, 3 * Cl), saved.children[kLn1]);
  saved.clear();
  return dx;
}

// nn::GptHead: logits (B, T, V/tp) = head(lnf(x)).
Sym head_forward(const Context& c, const LayerInfo& l, const Sym& x, SymSaved& saved, Term out_term) {
  saved.children.assign(2, SymSaved{});
  return linear_forward(c, layernorm_forward(c, x, saved.children[0], Term::Activations), saved.children[1], l.dim,
                        l.vocab_local, out_term);
}

Sym head_backward(const Context& c, const LayerInfo& l, const Sym& dy, SymSaved& saved) {
  Sym dx = input_shaped_backward(c, linear_backward(c, dy, saved.children[1], l.dim, l.vocab_local), saved.children[0]);
  saved.clear();
  return dx;
}

}  // namespace

Sym layer_forward(const Context& c, const LayerInfo& l, const Sym& x, SymSaved& saved, Term out_term) {
  switch (l.kind) {
    case LayerKind::Embedding:
      return embedding_forward(c, l, x, saved, out_term);
    case LayerKind::Block:
      return block_forward(c, l, x, saved, out_term);
    case LayerKind::Head:
      return head_forward(c, l, x, saved, out_term);
    case LayerKind::Linear:
      return linear_forward(c, x, saved, l.in, l.out, out_term);
    case LayerKind::Activation:
      return activation_forward(c, x, saved, out_term);
  }
  TANDEM_FAIL("planner: unhandled layer kind");
}

Sym layer_backward(const Context& c, const LayerInfo& l, const Sym& dy, SymSaved& saved) {
  switch (l.kind) {
    case LayerKind::Embedding:
      return embedding_backward(c, dy, saved);
    case LayerKind::Block:
      return block_backward(c, l, dy, saved);
    case LayerKind::Head:
      return head_backward(c, l, dy, saved);
    case LayerKind::Linear:
      return linear_backward(c, dy, saved, l.in, l.out);
    case LayerKind::Activation:
      return input_shaped_backward(c, dy, saved);
  }
  TANDEM_FAIL("planner: unhandled layer kind");
}

ZeroShadow::ZeroShadow(const Context& ctx, int stage, int dp, std::vector<int64_t> shard, int gathered_bytes)
    : ctx_(ctx), stage_(stage), dp_(dp), gathered_bytes_(gathered_bytes), shard_(std::move(shard)) {
  values_.resize(shard_.size());
  grads_.resize(shard_.size());
}

void ZeroShadow::gather(size_t layer) {
  if (!values_[layer].defined())
    values_[layer] = Sym(*ctx_.tracker, {shard_[layer] * dp_}, gathered_bytes_, Term::ZeroBuffers);
}

void ZeroShadow::before_forward(size_t layer) {
  if (stage_ == 3) gather(layer);
}

void ZeroShadow::after_forward(size_t layer) {
  if (stage_ == 3) values_[layer] = Sym();
}

void ZeroShadow::before_backward(size_t layer) {
  if (stage_ == 3) gather(layer);
  if (stage_ >= 2) grads_[layer] = Sym(*ctx_.tracker, {shard_[layer] * dp_}, 4, Term::ZeroBuffers);
}

void ZeroShadow::after_backward(size_t layer) {
  if (stage_ >= 2) {
    Sym reduced(*ctx_.tracker, {shard_[layer]}, 4, Term::ZeroBuffers);  // reduce-scatter target, then added
    grads_[layer] = Sym();
  }
  if (stage_ == 3) values_[layer] = Sym();
}

Sym forward_range(const Context& c, const ModelInfo& m, size_t first, size_t last, const Sym& input,
                  std::vector<SymSaved>& saved, bool recompute, ZeroShadow& hooks) {
  saved.assign(last - first, SymSaved{});
  Sym x = input;
  for (size_t i = first; i < last; ++i) {
    c.tracker->set_where(m.layers[i].name + " forward");
    hooks.before_forward(i);
    // The model's last layer returns the logits, which the loss turns into their gradient in place.
    Sym y = layer_forward(c, m.layers[i], x, saved[i - first],
                          i + 1 == m.layers.size() ? Term::Transient : Term::Activations);
    if (recompute) saved[i - first] = SymSaved{{x}, {}};
    hooks.after_forward(i);
    x = y;
  }
  return x;
}

Sym backward_range(const Context& c, const ModelInfo& m, size_t first, size_t last, const Sym& doutput,
                   std::vector<SymSaved>& saved, bool recompute, ZeroShadow& hooks) {
  Sym dy = doutput;
  for (size_t i = last; i-- > first;) {
    SymSaved& s = saved[i - first];
    c.tracker->set_where(m.layers[i].name + " backward");
    hooks.before_backward(i);
    if (recompute) {
      const Sym x = s.tensors.at(0);
      s.clear();
      c.tracker->recomputing = true;
      layer_forward(c, m.layers[i], x, s, Term::Transient);
      c.tracker->recomputing = false;
    }
    dy = layer_backward(c, m.layers[i], dy, s);
    s.clear();
    hooks.after_backward(i);
  }
  return dy;
}

void loss(const Context& c, const Sym& logits) {
  const int64_t n = logits.numel() / logits.dim(-1);
  c.tracker->set_where("loss");
  [[maybe_unused]] Sym row_max = c.f32({n}, Term::Transient), target = c.f32({n}, Term::Transient),
                       lse = c.f32({n}, Term::Transient);
}

}  // namespace tandem::plan::shadow
