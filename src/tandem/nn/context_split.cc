#include "tandem/nn/context_split.h"

#include "tandem/core/error.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {

int64_t ContextSplit::chunk(int64_t T) const {
  TANDEM_CHECK(T % (2 * size) == 0, "a sequence of ", T, " tokens does not split into 2 x ", size,
               " equal chunks for context parallelism");
  return T / (2 * size);
}

int64_t ContextSplit::chunk_start_of(int shard, int64_t T, int k) const {
  return (k == 0 ? shard : 2 * size - 1 - shard) * chunk(T);
}

std::vector<ContextSplit::Run> ContextSplit::runs(int64_t T) const {
  if (!active()) return {{0, 0, T}};
  const int64_t c = chunk(T);
  return {{0, chunk_start(T, 0), c}, {c, chunk_start(T, 1), c}};
}

Tensor ContextSplit::shard_sequences(const Tensor& x) const {
  TANDEM_CHECK(x.rank() >= 2, "shard_sequences expects (B, T, ...), got ", shape_str(x.shape()));
  const int64_t B = x.dim(0), T = x.dim(1), inner = x.numel() / (B * T), c = chunk(T), Tl = T / size;
  Shape shape = x.shape();
  shape[1] = Tl;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device(), "context shard of the batch");  // (B, Tl, ...)
  for (int64_t b = 0; b < B; ++b)
    for (int k = 0; k < 2; ++k)
      out.flat_slice((b * Tl + k * c) * inner, c * inner, {c * inner})
          .copy_from(x.flat_slice((b * T + chunk_start(T, k)) * inner, c * inner, {c * inner}));
  return out;
}

namespace {

// Each part's width and first column, checked to divide over `size` shards.
struct Parts {
  std::vector<int64_t> width, offset;
  int64_t total = 0;
};

Parts parts_of(const std::vector<int64_t>& widths, int64_t W, int size) {
  Parts p;
  for (const int64_t w : widths) {
    TANDEM_CHECK(w > 0 && w % size == 0, "context parallelism: a part of ", w, " columns over ", size, " shards");
    p.width.push_back(w);
    p.offset.push_back(p.total);
    p.total += w;
  }
  TANDEM_CHECK(p.total == W, "context parallelism: parts of ", p.total, " columns for rows of ", W);
  return p;
}

}  // namespace

Tensor ContextSplit::gather_sequence(const Tensor& x, const std::vector<int64_t>& widths) const {
  TANDEM_CHECK(x.rank() == 3, "gather_sequence expects (B, Tl, W), got ", shape_str(x.shape()));
  const int64_t B = x.dim(0), Tl = x.dim(1), W = x.dim(2), T = Tl * size, c = chunk(T), Wc = W / size;
  const Parts p = parts_of(widths, W, size);
  Device& dev = x.device();
  // send[j] (B, Tl, W / cp): slice j of every part, for shard j.
  Tensor send = Tensor::empty({size, B, Tl, Wc}, x.dtype(), dev, "context all-to-all (send)");
  const Tensor rows = x.view({B * Tl, W});
  for (int j = 0; j < size; ++j) {
    const Tensor to = send.flat_slice(j * B * Tl * Wc, B * Tl * Wc, {B * Tl, Wc});
    for (size_t i = 0; i < p.width.size(); ++i) {
      const int64_t w = p.width[i] / size;
      ops::copy_columns(rows, p.offset[i] + j * w, to, p.offset[i] / size, w);
    }
  }
  // recv[s] (B, Tl, W / cp): shard s's tokens of this shard's slices.
  Tensor recv = Tensor::empty({size, B, Tl, Wc}, x.dtype(), dev, "context all-to-all (receive)");
  exchange->all_to_all(send.view({send.numel()}), recv.view({recv.numel()}));
  send = Tensor();
  Tensor y = Tensor::empty({B, T, Wc}, x.dtype(), dev, "context-gathered sequence");  // (B, T, W / cp)
  for (int s = 0; s < size; ++s)
    for (int64_t b = 0; b < B; ++b)
      for (int k = 0; k < 2; ++k)
        y.flat_slice((b * T + chunk_start_of(s, T, k)) * Wc, c * Wc, {c * Wc})
            .copy_from(recv.flat_slice(((s * B + b) * Tl + k * c) * Wc, c * Wc, {c * Wc}));
  return y;
}

Tensor ContextSplit::scatter_sequence(const Tensor& x, const std::vector<int64_t>& widths) const {
  TANDEM_CHECK(x.rank() == 3, "scatter_sequence expects (B, T, W / cp), got ", shape_str(x.shape()));
  const int64_t B = x.dim(0), T = x.dim(1), Wc = x.dim(2), Tl = T / size, c = chunk(T), W = Wc * size;
  const Parts p = parts_of(widths, W, size);
  Device& dev = x.device();
  // send[j] (B, Tl, W / cp): shard j's tokens of this shard's slices.
  Tensor send = Tensor::empty({size, B, Tl, Wc}, x.dtype(), dev, "context all-to-all (send)");
  for (int j = 0; j < size; ++j)
    for (int64_t b = 0; b < B; ++b)
      for (int k = 0; k < 2; ++k)
        send.flat_slice(((j * B + b) * Tl + k * c) * Wc, c * Wc, {c * Wc})
            .copy_from(x.flat_slice((b * T + chunk_start_of(j, T, k)) * Wc, c * Wc, {c * Wc}));
  // recv[s] (B, Tl, W / cp): slice s of every part, for this shard's tokens.
  Tensor recv = Tensor::empty({size, B, Tl, Wc}, x.dtype(), dev, "context all-to-all (receive)");
  exchange->all_to_all(send.view({send.numel()}), recv.view({recv.numel()}));
  send = Tensor();
  Tensor y = Tensor::empty({B, Tl, W}, x.dtype(), dev, "context-scattered sequence");  // (B, Tl, W)
  const Tensor rows = y.view({B * Tl, W});
  for (int s = 0; s < size; ++s) {
    const Tensor from = recv.flat_slice(s * B * Tl * Wc, B * Tl * Wc, {B * Tl, Wc});
    for (size_t i = 0; i < p.width.size(); ++i) {
      const int64_t w = p.width[i] / size;
      ops::copy_columns(from, p.offset[i] / size, rows, p.offset[i] + s * w, w);
    }
  }
  return y;
}

int ContextSplit::kv_copies(int64_t kv_heads) const {
  if (kv_heads % size == 0) return 1;
  TANDEM_CHECK(size % kv_heads == 0, "context parallelism: ", kv_heads, " key/value heads over ", size,
               " shards: attention by heads cannot regroup them (spec::heads_split; auto runs ring attention instead)");
  return static_cast<int>(size / kv_heads);
}

Tensor ContextSplit::gather_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads) const {
  const int r = kv_copies(kv_heads);
  const int64_t B = qkv.dim(0), Tl = qkv.dim(1), W = qkv.dim(2), d = W / (heads + 2 * kv_heads);
  if (r == 1) return gather_sequence(qkv, {heads * d, kv_heads * d, kv_heads * d});
  // (B, Tl, (H + 2 r Hkv) D): q as is, then k and v with each head's r copies side by side.
  const int64_t We = (heads + 2 * r * kv_heads) * d;
  Tensor wide = Tensor::empty({B, Tl, We}, qkv.dtype(), qkv.device(), "context-repeated key/value heads");
  const Tensor from = qkv.view({B * Tl, W}), to = wide.view({B * Tl, We});
  ops::copy_columns(from, 0, to, 0, heads * d);
  for (int64_t h = 0; h < 2 * kv_heads; ++h)  // k heads, then v heads
    for (int c = 0; c < r; ++c) ops::copy_columns(from, (heads + h) * d, to, (heads + h * r + c) * d, d);
  return gather_sequence(wide, {heads * d, r * kv_heads * d, r * kv_heads * d});
}

Tensor ContextSplit::scatter_qkv(const Tensor& dqkv, int64_t heads, int64_t kv_heads) const {
  const int r = kv_copies(kv_heads);
  const int64_t d = dqkv.dim(2) * size / (heads + 2 * r * kv_heads);
  if (r == 1) return scatter_sequence(dqkv, {heads * d, kv_heads * d, kv_heads * d});
  const Tensor wide = scatter_sequence(dqkv, {heads * d, r * kv_heads * d, r * kv_heads * d});  // (B, Tl, We)
  const int64_t B = wide.dim(0), Tl = wide.dim(1), We = wide.dim(2), N = B * Tl, Wkv = 2 * kv_heads * d;
  Device& dev = wide.device();
  Tensor out = Tensor::empty({B, Tl, (heads + 2 * kv_heads) * d}, wide.dtype(), dev, "context-summed qkv grad");
  const Tensor from = wide.view({N, We}), to = out.view({N, (heads + 2 * kv_heads) * d});
  ops::copy_columns(from, 0, to, 0, heads * d);
  // copies[c] (N, 2 Hkv D): copy c of every k and v head; summed into copies[0] in order.
  Tensor copies = Tensor::empty({r, N, Wkv}, wide.dtype(), dev, "context key/value head copies");
  for (int c = 0; c < r; ++c) {
    const Tensor part = copies.flat_slice(c * N * Wkv, N * Wkv, {N, Wkv});
    for (int64_t h = 0; h < 2 * kv_heads; ++h) ops::copy_columns(from, (heads + h * r + c) * d, part, h * d, d);
  }
  const Tensor sum = copies.flat_slice(0, N * Wkv, {N, Wkv});
  for (int c = 1; c < r; ++c) ops::add(sum, copies.flat_slice(c * N * Wkv, N * Wkv, {N, Wkv}), sum);
  ops::copy_columns(sum, 0, to, heads * d, Wkv);
  return out;
}

}  // namespace tandem::nn
