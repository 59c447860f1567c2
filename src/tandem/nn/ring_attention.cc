// Ring attention (ring_attention.h): the chunks of a shard's q and of the travelling k | v, the block pairs each step
// computes, the merge of their outputs, and the backward's gradients passed on with their keys.
#include "tandem/nn/ring_attention.h"

#include <limits>
#include <utility>
#include <vector>

#include "tandem/ops/attention_pair.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {
namespace {

// A shard's tokens chunk by chunk: (2, B, c, w) with chunk k a contiguous (B, c, w).
struct Chunked {
  Tensor t;  // (2, B, c, w)
  Tensor chunk(int k) const {
    const int64_t n = t.numel() / 2;
    return t.flat_slice(k * n, n, {t.dim(1), t.dim(2), t.dim(3)});
  }
};

// Columns [col, col + w) of x (B, Tl, W) chunk by chunk: (2, B, c, w), in `dtype` (a cast where it differs).
Chunked chunked(const Tensor& x, int64_t col, int64_t w, DType dtype, const char* what) {
  const int64_t B = x.dim(0), Tl = x.dim(1), W = x.dim(2), c = Tl / 2;
  Device& dev = x.device();
  Tensor same = Tensor::empty({2, B, c, w}, x.dtype(), dev, what);
  for (int k = 0; k < 2; ++k)
    for (int64_t b = 0; b < B; ++b)
      ops::copy_columns(x.flat_slice((b * Tl + k * c) * W, c * W, {c, W}), col,
                        same.flat_slice((k * B + b) * c * w, c * w, {c, w}), 0, w);
  if (dtype == x.dtype()) return {same};
  Tensor cast = Tensor::empty(same.shape(), dtype, dev, what);
  ops::cast(same, cast);
  return {cast};
}

// The inverse: from (2, B, c, w) into columns [col, col + w) of x (B, Tl, W), cast to x's dtype.
void unchunk(const Chunked& from, const Tensor& x, int64_t col) {
  const int64_t B = x.dim(0), Tl = x.dim(1), W = x.dim(2), c = Tl / 2, w = from.t.dim(3);
  Tensor same = from.t;
  if (same.dtype() != x.dtype()) {
    same = Tensor::empty(from.t.shape(), x.dtype(), x.device(), "ring attention result");
    ops::cast(from.t, same);
  }
  for (int k = 0; k < 2; ++k)
    for (int64_t b = 0; b < B; ++b)
      ops::copy_columns(same.flat_slice((k * B + b) * c * w, c * w, {c, w}), 0,
                        x.flat_slice((b * Tl + k * c) * W, c * W, {c, W}), col, w);
}

// lse (B, H, Tl) <-> chunk by chunk (2, B, H, c).
Chunked lse_chunked(const Tensor& lse) {
  const int64_t B = lse.dim(0), H = lse.dim(1), Tl = lse.dim(2), c = Tl / 2;
  Tensor out = Tensor::empty({2, B, H, c}, DType::F32, lse.device(), "ring attention lse");
  for (int k = 0; k < 2; ++k)
    for (int64_t i = 0; i < B * H; ++i)
      out.flat_slice((k * B * H + i) * c, c, {c}).copy_from(lse.flat_slice(i * Tl + k * c, c, {c}));
  return {out};
}
void lse_unchunk(const Chunked& from, const Tensor& lse) {
  const int64_t B = lse.dim(0), H = lse.dim(1), Tl = lse.dim(2), c = Tl / 2;
  for (int k = 0; k < 2; ++k)
    for (int64_t i = 0; i < B * H; ++i)
      lse.flat_slice(i * Tl + k * c, c, {c}).copy_from(from.t.flat_slice((k * B * H + i) * c, c, {c}));
}

// The pairs shard `rank` computes with the blocks of shard `source`: each of its query chunks k against each key chunk
// m, placed in the sequence (chunk r early, 2 cp - 1 - r late); a key chunk after the query chunk left out. In chunk
// order.
struct Pair {
  int k, m;
  ops::PairPlace place;
};
std::vector<Pair> pairs_of(const ContextSplit& cp, int source, int64_t c, const Tensor& documents) {
  std::vector<Pair> out;
  for (int k = 0; k < 2; ++k)
    for (int m = 0; m < 2; ++m) {
      const int64_t q0 = cp.chunk_start_of(cp.rank, 2 * c * cp.size, k),
                    k0 = cp.chunk_start_of(source, 2 * c * cp.size, m);
      if (k0 <= q0) out.push_back({k, m, ops::PairPlace{q0, k0, documents}});
    }
  return out;
}

int source_at(const ContextSplit& cp, int step) { return (cp.rank - step + cp.size) % cp.size; }

}  // namespace

void ring_attention_forward(const ContextSplit& cp, const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                            const Tensor& y, const Tensor& lse) {
  const int64_t B = qkv.dim(0), Tl = qkv.dim(1), W = qkv.dim(2), d = W / (heads + 2 * kv_heads), c = Tl / 2;
  const int64_t Wq = heads * d, Wkv = 2 * kv_heads * d;
  Device& dev = qkv.device();
  const Chunked q = chunked(qkv, 0, Wq, qkv.dtype(), "ring attention queries");  // (2, B, c, H D)
  Chunked held = chunked(qkv, Wq, Wkv, qkv.dtype(), "ring attention keys");      // (2, B, c, 2 Hkv D)
  Chunked next{Tensor::empty(held.t.shape(), qkv.dtype(), dev, "ring attention keys (next)")};
  // The merged result of each query chunk: (2, B, c, H D) f32 and (2, B, H, c) f32, nothing yet.
  const Chunked out{Tensor::zeros({2, B, c, Wq}, DType::F32, dev, "ring attention output")};
  const Chunked out_lse{Tensor::empty({2, B, heads, c}, DType::F32, dev, "ring attention lse")};
  ops::fill(out_lse.t, -std::numeric_limits<float>::infinity());
  Tensor part = Tensor::empty({B, c, Wq}, DType::F32, dev, "ring attention partial output");
  Tensor part_lse = Tensor::empty({B, heads, c}, DType::F32, dev, "ring attention partial lse");
  for (int step = 0; step < cp.size; ++step) {
    std::unique_ptr<ContextExchange::Pass> pass;
    if (step + 1 < cp.size) pass = cp.exchange->pass(held.t, next.t);
    for (const Pair& p : pairs_of(cp, source_at(cp, step), c, documents)) {
      ops::attention_pair_forward(q.chunk(p.k), held.chunk(p.m), heads, kv_heads, p.place, part, part_lse);
      ops::attention_merge(part, part_lse, out.chunk(p.k), out_lse.chunk(p.k));
    }
    if (!pass) continue;
    pass->wait();
    std::swap(held, next);
  }
  unchunk(out, y, 0);
  lse_unchunk(out_lse, lse);
}

void ring_attention_backward(const ContextSplit& cp, const Tensor& qkv, int heads, int kv_heads,
                             const Tensor& documents, const Tensor& y, const Tensor& lse, const Tensor& dy,
                             const Tensor& dqkv) {
  const int64_t B = qkv.dim(0), W = qkv.dim(2), d = W / (heads + 2 * kv_heads), c = qkv.dim(1) / 2;
  const int64_t Wq = heads * d, Wkv = 2 * kv_heads * d;
  Device& dev = qkv.device();
  const DType X = qkv.dtype();
  const Chunked q = chunked(qkv, 0, Wq, X, "ring attention queries");  // (2, B, c, H D)
  const Chunked out = chunked(y, 0, Wq, X, "ring attention output");   // (2, B, c, H D)
  const Chunked dout = chunked(dy, 0, Wq, X, "ring attention output grad");
  const Chunked out_lse = lse_chunked(lse);                        // (2, B, H, c)
  Chunked held = chunked(qkv, Wq, Wkv, X, "ring attention keys");  // (2, B, c, 2 Hkv D)
  Chunked next{Tensor::empty(held.t.shape(), X, dev, "ring attention keys (next)")};
  // dq of this shard's queries, and the gradient of the held keys and values, which travels with them: f32.
  const Chunked dq{Tensor::zeros({2, B, c, Wq}, DType::F32, dev, "ring attention q grad")};
  Chunked dheld{Tensor::zeros(held.t.shape(), DType::F32, dev, "ring attention key grad")};
  Chunked dnext{Tensor::empty(held.t.shape(), DType::F32, dev, "ring attention key grad (next)")};
  for (int step = 0; step < cp.size; ++step) {
    std::unique_ptr<ContextExchange::Pass> pass;
    if (step + 1 < cp.size) pass = cp.exchange->pass(held.t, next.t);
    for (const Pair& p : pairs_of(cp, source_at(cp, step), c, documents))
      ops::attention_pair_backward(q.chunk(p.k), held.chunk(p.m), heads, kv_heads, p.place, out.chunk(p.k),
                                   out_lse.chunk(p.k), dout.chunk(p.k), dq.chunk(p.k), dheld.chunk(p.m));
    // The gradient goes on with its keys (after the last step, home: shard r + 1's held ones are shard r + 1's own).
    cp.exchange->pass(dheld.t, dnext.t)->wait();
    std::swap(dheld, dnext);
    if (!pass) continue;
    pass->wait();
    std::swap(held, next);
  }
  unchunk(dq, dqkv, 0);
  unchunk(dheld, dqkv, Wq);
}

}  // namespace tandem::nn
