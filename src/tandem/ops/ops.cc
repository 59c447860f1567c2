// The op front end: checks every call's shapes and dtypes against the contract in ops.h, then calls the op in the
// table (backend.h) of the device kind: ops/cpu, ops/cuda or the counting backend (while profiling, the timed copies
// of the first two: profile.h). Data-dependent checks (ids in range) live in the backends.
#include "tandem/ops/ops.h"

#include <climits>
#include <initializer_list>
#include <string>
#include <utility>

#include "tandem/ops/op_checks.h"

namespace tandem::ops {
using namespace checks;

void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float beta) {
  check_devices("matmul", c, a, b);
  const DType x = check_compute("matmul", {{"a", a}, {"b", b}});
  // Weight gradients accumulate into fp32 buffers: c may be f32 whatever a and b hold.
  TANDEM_CHECK(c.dtype() == x || c.dtype() == DType::F32, "matmul: c ", shape_str(c.shape()), " holds ",
               dtype_name(c.dtype()), "; with a and b in ", dtype_name(x), " it must hold ",
               x == DType::F32 ? "f32" : dtype_name(x) + " or f32");
  const int64_t m = trans_a ? cols_of(a) : rows_of(a);
  const int64_t k = trans_a ? rows_of(a) : cols_of(a);
  const int64_t kb = trans_b ? cols_of(b) : rows_of(b);
  const int64_t n = trans_b ? rows_of(b) : cols_of(b);
  TANDEM_CHECK(k == kb && rows_of(c) == m && cols_of(c) == n, "matmul: a ", shape_str(a.shape()), trans_a ? "^T" : "",
               " @ b ", shape_str(b.shape()), trans_b ? "^T" : "", " does not fit c ", shape_str(c.shape()));
  // BLAS takes 32-bit dimensions and leading dims.
  for (int64_t d : {rows_of(a), cols_of(a), rows_of(b), cols_of(b), m, n})
    TANDEM_CHECK(d <= INT_MAX, "matmul: dimension ", d, " exceeds the 32-bit BLAS interface");
  TANDEM_CHECK(!overlaps(c, a) && !overlaps(c, b), "matmul: c ", shape_str(c.shape()), " shares memory with an input");
  return backend_of("matmul", c).matmul(a, b, c, trans_a, trans_b, beta);
}

void add_bias(const Tensor& y, const Tensor& bias) {
  check_devices("add_bias", y, bias);
  check_compute("add_bias", {{"y", y}, {"bias", bias}});
  check_channels("add_bias", "bias", bias, y);
  return backend_of("add_bias", y).add_bias(y, bias);
}

void bias_backward(const Tensor& dy, const Tensor& dbias) {
  check_devices("bias_backward", dy, dbias);
  check_compute("bias_backward", {{"dy", dy}});
  check_f32("bias_backward", "dbias", dbias);
  check_channels("bias_backward", "dbias", dbias, dy);
  return backend_of("bias_backward", dy).bias_backward(dy, dbias);
}

namespace {
// An optional tensor of a call (undefined leaves its term out): when given, on the kind of device of `like`.
void check_optional_device(const char* op, const char* name, const Tensor& t, const Tensor& like) {
  if (!t.defined()) return;
  TANDEM_CHECK(t.device().kind() == like.device().kind(), op, ": ", name, " on ", t.device().name(), " and ",
               shape_str(like.shape()), " on ", like.device().name());
}

// x (N, in) and w (out, in) of a linear layer against its output (N, out); 32-bit BLAS dimensions.
void check_linear(const char* op, const Tensor& x, const Tensor& w, const char* out_name, const Tensor& out) {
  TANDEM_CHECK(w.rank() == 2 && cols_of(x) == w.dim(1) && rows_of(out) == rows_of(x) && cols_of(out) == w.dim(0), op,
               ": x ", shape_str(x.shape()), " and weight ", shape_str(w.shape()), " (out, in) do not fit ", out_name,
               " ", shape_str(out.shape()));
  for (int64_t d : {rows_of(x), cols_of(x), w.dim(0)})
    TANDEM_CHECK(d <= INT_MAX, op, ": dimension ", d, " exceeds the 32-bit BLAS interface");
}
}  // namespace

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                    const Tensor& y) {
  const char* op = "linear_forward";
  check_devices(op, y, x, weight);
  check_optional_device(op, "bias", bias, y);
  check_optional_device(op, "residual", residual, y);
  check_compute(op, {{"x", x}, {"weight", weight}, {"y", y}});
  check_linear(op, x, weight, "y", y);
  if (bias.defined()) {
    check_dtype(op, "bias", bias, y.dtype());
    check_channels(op, "bias", bias, y);
  }
  if (residual.defined()) {
    check_dtype(op, "residual", residual, y.dtype());
    check_same_shape(op, "residual", residual, "y", y);
  }
  for (const auto& [name, t] : {Named{"x", x}, {"weight", weight}, {"bias", bias}, {"residual", residual}})
    TANDEM_CHECK(!t.defined() || !overlaps(y, t), op, ": y ", shape_str(y.shape()), " shares memory with ", name);
  return backend_of(op, y).linear_forward(x, weight, bias, residual, y);
}

void linear_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dweight, const Tensor& dbias) {
  const char* op = "linear_weight_grad";
  check_devices(op, dweight, dy, x);
  check_optional_device(op, "dbias", dbias, dweight);
  const DType t = check_compute(op, {{"dy", dy}, {"x", x}});
  TANDEM_CHECK(dweight.dtype() == t || dweight.dtype() == DType::F32, op, ": dweight ", shape_str(dweight.shape()),
               " holds ", dtype_name(dweight.dtype()), "; with dy and x in ", dtype_name(t), " it must hold ",
               t == DType::F32 ? "f32" : dtype_name(t) + " or f32");
  // dweight (out, in) is the weight's shape: x (N, in) against dy (N, out).
  check_linear(op, x, dweight, "dy", dy);
  if (dbias.defined()) {
    check_f32(op, "dbias", dbias);
    check_channels(op, "dbias", dbias, dy);
    TANDEM_CHECK(!overlaps(dbias, dweight), op, ": dbias shares memory with dweight");
  }
  TANDEM_CHECK(!overlaps(dweight, dy) && !overlaps(dweight, x), op, ": dweight ", shape_str(dweight.shape()),
               " shares memory with an input");
  return backend_of(op, dweight).linear_weight_grad(dy, x, dweight, dbias);
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_devices("add", out, a, b);
  check_compute("add", {{"a", a}, {"b", b}, {"out", out}});
  check_same_shape("add", "a", a, "b", b);
  check_same_shape("add", "a", a, "out", out);
  return backend_of("add", out).add(a, b, out);
}

void axpy(float alpha, const Tensor& x, const Tensor& y) {
  check_devices("axpy", y, x);
  check_compute("axpy", {{"x", x}, {"y", y}});
  // Flat buffers of equal size are fine (gradient accumulation over parameter groups); the shapes may differ.
  TANDEM_CHECK(x.numel() == y.numel(), "axpy: x ", shape_str(x.shape()), " and y ", shape_str(y.shape()),
               " differ in size");
  return backend_of("axpy", y).axpy(alpha, x, y);
}

void scale(const Tensor& x, float alpha) {
  check_devices("scale", x);
  check_compute("scale", {{"x", x}});
  return backend_of("scale", x).scale(x, alpha);
}

void fill(const Tensor& x, float value) {
  check_devices("fill", x);
  check_compute("fill", {{"x", x}});
  return backend_of("fill", x).fill(x, value);
}

void random_fill(const Tensor& out, const RandomFill& fill) {
  const char* op = "random_fill";
  check_devices(op, out);
  check_f32(op, "out", out);
  TANDEM_CHECK(fill.shard.parts >= 1 && fill.shard.split % fill.shard.parts == 0, op, ": a part ", fill.shard.part,
               " of ", fill.shard.parts, " of a middle dim of ", fill.shard.split);
  return backend_of(op, out).random_fill(out, fill);
}

void relu_forward(const Tensor& x, const Tensor& y) {
  check_devices("relu_forward", y, x);
  check_compute("relu_forward", {{"x", x}, {"y", y}});
  check_same_shape("relu_forward", "x", x, "y", y);
  return backend_of("relu_forward", y).relu_forward(x, y);
}

void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_devices("relu_backward", dx, x, dy);
  check_compute("relu_backward", {{"x", x}, {"dy", dy}, {"dx", dx}});
  check_same_shape("relu_backward", "x", x, "dy", dy);
  check_same_shape("relu_backward", "x", x, "dx", dx);
  return backend_of("relu_backward", dx).relu_backward(x, dy, dx);
}

void sigmoid_forward(const Tensor& x, const Tensor& y) {
  check_devices("sigmoid_forward", y, x);
  check_compute("sigmoid_forward", {{"x", x}, {"y", y}});
  check_same_shape("sigmoid_forward", "x", x, "y", y);
  return backend_of("sigmoid_forward", y).sigmoid_forward(x, y);
}

void sigmoid_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  check_devices("sigmoid_backward", dx, y, dy);
  check_compute("sigmoid_backward", {{"y", y}, {"dy", dy}, {"dx", dx}});
  check_same_shape("sigmoid_backward", "y", y, "dy", dy);
  check_same_shape("sigmoid_backward", "y", y, "dx", dx);
  return backend_of("sigmoid_backward", dx).sigmoid_backward(y, dy, dx);
}

void gelu_forward(const Tensor& x, const Tensor& y) {
  check_devices("gelu_forward", y, x);
  check_compute("gelu_forward", {{"x", x}, {"y", y}});
  check_same_shape("gelu_forward", "x", x, "y", y);
  return backend_of("gelu_forward", y).gelu_forward(x, y);
}

void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_devices("gelu_backward", dx, x, dy);
  check_compute("gelu_backward", {{"x", x}, {"dy", dy}, {"dx", dx}});
  check_same_shape("gelu_backward", "x", x, "dy", dy);
  check_same_shape("gelu_backward", "x", x, "dx", dx);
  return backend_of("gelu_backward", dx).gelu_backward(x, dy, dx);
}

void bias_gelu_forward(const Tensor& x, const Tensor& bias, const Tensor& y) {
  const char* op = "bias_gelu_forward";
  check_devices(op, y, x, bias);
  check_compute(op, {{"x", x}, {"bias", bias}, {"y", y}});
  check_same_shape(op, "x", x, "y", y);
  check_channels(op, "bias", bias, x);
  return backend_of(op, y).bias_gelu_forward(x, bias, y);
}

void bias_gelu_backward(const Tensor& x, const Tensor& bias, const Tensor& dy, const Tensor& dx) {
  const char* op = "bias_gelu_backward";
  check_devices(op, dx, x, bias, dy);
  check_compute(op, {{"x", x}, {"bias", bias}, {"dy", dy}, {"dx", dx}});
  check_same_shape(op, "x", x, "dy", dy);
  check_same_shape(op, "x", x, "dx", dx);
  check_channels(op, "bias", bias, x);
  return backend_of(op, dx).bias_gelu_backward(x, bias, dy, dx);
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, const Tensor& mean,
                       const Tensor& rstd, float eps) {
  check_devices("layernorm_forward", y, x, gamma, beta, mean, rstd);
  check_compute("layernorm_forward", {{"x", x}, {"gamma", gamma}, {"beta", beta}, {"y", y}});
  check_f32("layernorm_forward", "mean", mean);
  check_f32("layernorm_forward", "rstd", rstd);
  check_same_shape("layernorm_forward", "x", x, "y", y);
  check_channels("layernorm_forward", "gamma", gamma, x);
  check_channels("layernorm_forward", "beta", beta, x);
  check_per_row("layernorm_forward", "mean", mean, x);
  check_per_row("layernorm_forward", "rstd", rstd, x);
  return backend_of("layernorm_forward", y).layernorm_forward(x, gamma, beta, y, mean, rstd, eps);
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  check_devices("layernorm_backward", dx, dy, x, gamma, mean, rstd, dgamma, dbeta);
  check_compute("layernorm_backward", {{"dy", dy}, {"x", x}, {"gamma", gamma}, {"dx", dx}});
  for (const auto& [name, t] : {Named{"mean", mean}, {"rstd", rstd}, {"dgamma", dgamma}, {"dbeta", dbeta}})
    check_f32("layernorm_backward", name, t);
  check_same_shape("layernorm_backward", "x", x, "dy", dy);
  check_same_shape("layernorm_backward", "x", x, "dx", dx);
  check_channels("layernorm_backward", "gamma", gamma, x);
  check_channels("layernorm_backward", "dgamma", dgamma, x);
  check_channels("layernorm_backward", "dbeta", dbeta, x);
  check_per_row("layernorm_backward", "mean", mean, x);
  check_per_row("layernorm_backward", "rstd", rstd, x);
  return backend_of("layernorm_backward", dx).layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
}

void layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                            const Tensor& rstd, const Tensor& dres, const Tensor& dx, const Tensor& dgamma,
                            const Tensor& dbeta) {
  const char* op = "layernorm_backward_add";
  check_devices(op, dx, dy, x, gamma, mean, rstd, dres, dgamma, dbeta);
  check_compute(op, {{"dy", dy}, {"x", x}, {"gamma", gamma}, {"dres", dres}, {"dx", dx}});
  for (const auto& [name, t] : {Named{"mean", mean}, {"rstd", rstd}, {"dgamma", dgamma}, {"dbeta", dbeta}})
    check_f32(op, name, t);
  check_same_shape(op, "x", x, "dy", dy);
  check_same_shape(op, "x", x, "dx", dx);
  check_same_shape(op, "x", x, "dres", dres);
  check_channels(op, "gamma", gamma, x);
  check_channels(op, "dgamma", dgamma, x);
  check_channels(op, "dbeta", dbeta, x);
  check_per_row(op, "mean", mean, x);
  check_per_row(op, "rstd", rstd, x);
  TANDEM_CHECK(!overlaps(dx, dres), op, ": dx ", shape_str(dx.shape()), " shares memory with dres");
  return backend_of(op, dx).layernorm_backward_add(dy, x, gamma, mean, rstd, dres, dx, dgamma, dbeta);
}

namespace {
// ids (N) index rows of a table (V_local, C); y or dy is (N, C) read as rows. Forward reads the table and writes y
// in the compute dtype; backward reads dy in it and accumulates into an f32 dtable.
void check_embedding(const char* op, bool backward, const Tensor& ids, const Tensor& table, const Tensor& rows) {
  check_dtype(op, "ids", ids, DType::I32);
  if (backward) {
    check_compute(op, {{"dy", rows}});
    check_f32(op, "dtable", table);
  } else {
    check_compute(op, {{"table", table}, {"y", rows}});
  }
  TANDEM_CHECK(table.rank() == 2 && cols_of(rows) == table.dim(1) && rows_of(rows) == ids.numel(), op, ": ids ",
               shape_str(ids.shape()), " and table ", shape_str(table.shape()), " do not fit ",
               shape_str(rows.shape()));
}
}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& y) {
  embedding_forward(ids, table, y, 0, table.rank() == 2 ? table.dim(0) : 0);
}

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& y, int64_t start, int64_t vocab) {
  check_devices("embedding_forward", y, ids, table);
  check_embedding("embedding_forward", false, ids, table, y);
  TANDEM_CHECK(start >= 0 && start + table.dim(0) <= vocab && vocab <= kUncheckedVocab, "embedding_forward: table ",
               shape_str(table.shape()), " at row ", start, " does not fit a vocabulary of ", vocab);
  return backend_of("embedding_forward", y).embedding_forward(ids, table, y, start, vocab);
}

void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dtable) {
  check_devices("embedding_backward", dtable, ids, dy);
  check_embedding("embedding_backward", true, ids, dtable, dy);
  return backend_of("embedding_backward", dtable).embedding_backward(ids, dy, dtable, 0, dtable.dim(0));
}

void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dtable, int64_t start) {
  check_devices("embedding_backward", dtable, ids, dy);
  check_embedding("embedding_backward", true, ids, dtable, dy);
  TANDEM_CHECK(start >= 0, "embedding_backward: negative shard start ", start);
  return backend_of("embedding_backward", dtable).embedding_backward(ids, dy, dtable, start, kUncheckedVocab);
}

void add_positions(const Tensor& y, const Tensor& pos) {
  check_devices("add_positions", y, pos);
  check_compute("add_positions", {{"y", y}, {"pos", pos}});
  TANDEM_CHECK(y.rank() == 3 && pos.rank() == 2 && y.dim(1) <= pos.dim(0) && y.dim(2) == pos.dim(1),
               "add_positions: y ", shape_str(y.shape()), " (B, T, C) does not fit pos ", shape_str(pos.shape()),
               " (T_max, C)");
  return backend_of("add_positions", y).add_positions(y, pos);
}

void add_positions_backward(const Tensor& dy, const Tensor& dpos) {
  check_devices("add_positions_backward", dpos, dy);
  check_compute("add_positions_backward", {{"dy", dy}});
  check_f32("add_positions_backward", "dpos", dpos);
  TANDEM_CHECK(dy.rank() == 3 && dpos.rank() == 2 && dy.dim(1) <= dpos.dim(0) && dy.dim(2) == dpos.dim(1),
               "add_positions_backward: dy ", shape_str(dy.shape()), " (B, T, C) does not fit dpos ",
               shape_str(dpos.shape()), " (T_max, C)");
  return backend_of("add_positions_backward", dpos).add_positions_backward(dy, dpos);
}

namespace {
void check_attention(const char* op, const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse) {
  check_compute(op, {{"qkv", qkv}, {"y", y}});
  check_f32(op, "lse", lse);
  TANDEM_CHECK(qkv.rank() == 3 && heads > 0 && qkv.dim(2) % (3 * static_cast<int64_t>(heads)) == 0, op, ": qkv ",
               shape_str(qkv.shape()), " is not (B, T, 3C) with C divisible by ", heads, " heads");
  const int64_t b = qkv.dim(0), t = qkv.dim(1), c = qkv.dim(2) / 3;
  TANDEM_CHECK(y.shape() == Shape({b, t, c}), op, ": y ", shape_str(y.shape()), " does not match qkv ",
               shape_str(qkv.shape()));
  TANDEM_CHECK(lse.shape() == Shape({b, heads, t}), op, ": lse ", shape_str(lse.shape()),
               " is not (B, H, T) = ", shape_str({b, heads, t}));
  TANDEM_CHECK(t <= INT_MAX && 3 * c <= INT_MAX, op, ": qkv ", shape_str(qkv.shape()),
               " exceeds the 32-bit BLAS interface");
}
}  // namespace

void attention_forward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, int64_t block_bytes) {
  check_devices("attention_forward", y, qkv, lse);
  check_attention("attention_forward", qkv, heads, y, lse);
  TANDEM_CHECK(block_bytes >= 0, "attention_forward: block_bytes ", block_bytes, " is negative");
  return backend_of("attention_forward", y).attention_gqa_forward(qkv, heads, heads, y, lse, block_bytes);  // Hkv = H
}

void attention_backward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, const Tensor& dy,
                        const Tensor& dqkv, int64_t block_bytes) {
  check_devices("attention_backward", dqkv, qkv, y, lse, dy);
  check_attention("attention_backward", qkv, heads, y, lse);
  check_compute("attention_backward", {{"qkv", qkv}, {"y", y}, {"dy", dy}, {"dqkv", dqkv}});
  check_same_shape("attention_backward", "y", y, "dy", dy);
  check_same_shape("attention_backward", "qkv", qkv, "dqkv", dqkv);
  TANDEM_CHECK(!overlaps(dqkv, qkv) && !overlaps(dqkv, y) && !overlaps(dqkv, dy) && !overlaps(dqkv, lse),
               "attention_backward: dqkv shares memory with an input");
  TANDEM_CHECK(block_bytes >= 0, "attention_backward: block_bytes ", block_bytes, " is negative");
  return backend_of("attention_backward", dqkv)
      .attention_gqa_backward(qkv, heads, heads, y, lse, dy, dqkv, block_bytes);
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse) {
  check_devices("cross_entropy_forward", losses, logits, targets, lse);
  check_compute("cross_entropy_forward", {{"logits", logits}});
  check_dtype("cross_entropy_forward", "targets", targets, DType::I32);
  check_f32("cross_entropy_forward", "losses", losses);
  check_f32("cross_entropy_forward", "lse", lse);
  TANDEM_CHECK(cols_of(logits) > 0, "cross_entropy_forward: logits ", shape_str(logits.shape()), " has no classes");
  check_per_row("cross_entropy_forward", "targets", targets, logits);
  check_per_row("cross_entropy_forward", "losses", losses, logits);
  check_per_row("cross_entropy_forward", "lse", lse, logits);
  return backend_of("cross_entropy_forward", losses).cross_entropy_forward(logits, targets, losses, lse);
}

namespace {
void check_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                  const Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  check_devices(op, dlogits, logits, targets, lse);
  check_compute(op, {{"logits", logits}, {"dlogits", dlogits}});
  check_dtype(op, "targets", targets, DType::I32);
  check_f32(op, "lse", lse);
  check_same_shape(op, "logits", logits, "dlogits", dlogits);
  check_per_row(op, "targets", targets, logits);
  check_per_row(op, "lse", lse, logits);
  // Aliasing is allowed only as the exact same elements: a partial overlap would read overwritten logits.
  TANDEM_CHECK(!overlaps(dlogits, logits) || dlogits.raw() == logits.raw(), op, ": dlogits ",
               shape_str(dlogits.shape()), " partially overlaps logits");
}
}  // namespace

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale,
                            const Tensor& dlogits) {
  check_cross_entropy_backward(logits, targets, lse, dlogits);
  return backend_of("cross_entropy_backward", dlogits)
      .cross_entropy_backward(logits, targets, lse, scale, dlogits, 0, cols_of(logits));
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale,
                            const Tensor& dlogits, int64_t start) {
  check_cross_entropy_backward(logits, targets, lse, dlogits);
  TANDEM_CHECK(start >= 0, "cross_entropy_backward: negative shard start ", start);
  return backend_of("cross_entropy_backward", dlogits)
      .cross_entropy_backward(logits, targets, lse, scale, dlogits, start, kUncheckedVocab);
}

void cross_entropy_stats(const Tensor& logits, const Tensor& targets, int64_t start, int64_t vocab,
                         const Tensor& row_max, const Tensor& target_logit) {
  const char* op = "cross_entropy_stats";
  check_devices(op, row_max, logits, targets, target_logit);
  check_compute(op, {{"logits", logits}});
  check_dtype(op, "targets", targets, DType::I32);
  check_f32(op, "row_max", row_max);
  check_f32(op, "target_logit", target_logit);
  TANDEM_CHECK(cols_of(logits) > 0, op, ": logits ", shape_str(logits.shape()), " has no classes");
  TANDEM_CHECK(start >= 0 && start + cols_of(logits) <= vocab && vocab <= kUncheckedVocab, op, ": logits ",
               shape_str(logits.shape()), " at column ", start, " do not fit a vocabulary of ", vocab);
  check_per_row(op, "targets", targets, logits);
  check_per_row(op, "row_max", row_max, logits);
  check_per_row(op, "target_logit", target_logit, logits);
  return backend_of(op, row_max).cross_entropy_stats(logits, targets, start, vocab, row_max, target_logit);
}

void row_sum_exp(const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp) {
  const char* op = "row_sum_exp";
  check_devices(op, sum_exp, logits, row_max);
  check_compute(op, {{"logits", logits}});
  check_f32(op, "row_max", row_max);
  check_f32(op, "sum_exp", sum_exp);
  check_per_row(op, "row_max", row_max, logits);
  check_per_row(op, "sum_exp", sum_exp, logits);
  return backend_of(op, sum_exp).row_sum_exp(logits, row_max, sum_exp);
}

void cross_entropy_finish(const Tensor& row_max, const Tensor& target_logit, const Tensor& lse, const Tensor& targets,
                          const Tensor& loss_sum) {
  const char* op = "cross_entropy_finish";
  check_devices(op, lse, row_max, target_logit, targets, loss_sum);
  check_dtype(op, "targets", targets, DType::I32);
  TANDEM_CHECK(targets.numel() == lse.numel(), op, ": targets ", shape_str(targets.shape()), " and lse ",
               shape_str(lse.shape()), " differ in size (one element per row)");
  for (const auto& [name, t] : {Named{"row_max", row_max}, {"target_logit", target_logit}, {"lse", lse}}) {
    check_f32(op, name, t);
    TANDEM_CHECK(t.numel() == lse.numel(), op, ": ", name, " ", shape_str(t.shape()), " and lse ",
                 shape_str(lse.shape()), " differ in size (one element per row)");
  }
  check_f32(op, "loss_sum", loss_sum);
  TANDEM_CHECK(loss_sum.numel() == 1, op, ": loss_sum ", shape_str(loss_sum.shape()), " is not one element");
  TANDEM_CHECK(!overlaps(loss_sum, row_max) && !overlaps(loss_sum, target_logit) && !overlaps(loss_sum, lse), op,
               ": loss_sum shares memory with a per-row input");
  return backend_of(op, lse).cross_entropy_finish(row_max, target_logit, lse, targets, loss_sum);
}

double sum_squares(const Tensor& x) {
  check_devices("sum_squares", x);
  check_compute("sum_squares", {{"x", x}});
  return backend_of("sum_squares", x).sum_squares(x);
}

double sum_squares_total(const std::vector<Tensor>& xs) {
  if (xs.empty()) return 0.0;
  const char* op = "sum_squares_total";
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    TANDEM_CHECK(x.defined(), op, ": tensor ", i, " of ", xs.size(), " is undefined");
    TANDEM_CHECK(&x.device() == &xs[0].device(), op, ": tensor ", i, " is on ", x.device().name(), " and tensor 0 on ",
                 xs[0].device().name(), "; one call sums the tensors of one device");
    TANDEM_CHECK(is_float(x.dtype()), op, ": tensor ", i, " ", shape_str(x.shape()), " holds ", dtype_name(x.dtype()),
                 ", not a float dtype (f32, bf16 or f16)");
  }
  return backend_of(op, xs[0]).sum_squares_total(xs);
}

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p,
                const Tensor& rounded) {
  check_devices("adamw_step", param, grad, m, v);
  if (rounded.defined()) {
    check_devices("adamw_step", param, rounded);
    TANDEM_CHECK(rounded.dtype() == DType::BF16 || rounded.dtype() == DType::F16, "adamw_step: rounded is ",
                 dtype_name(rounded.dtype()), ", not bf16 or f16");
    TANDEM_CHECK(rounded.numel() == param.numel(), "adamw_step: rounded ", shape_str(rounded.shape()),
                 " differs in size from param ", shape_str(param.shape()));
  }
  // Master weights, fp32 gradients and moments: a 16-bit parameter is updated through its f32 master copy.
  for (const auto& [name, t] : {Named{"param", param}, {"grad", grad}, {"m", m}, {"v", v}}) {
    check_f32("adamw_step", name, t);
    TANDEM_CHECK(t.numel() == param.numel(), "adamw_step: ", name, " ", shape_str(t.shape()),
                 " differs in size from param ", shape_str(param.shape()));
  }
  TANDEM_CHECK(p.step >= 1, "adamw_step: step ", p.step, " must count from 1");
  return backend_of("adamw_step", param).adamw_step(param, grad, m, v, p, rounded);
}

void copy_columns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col, int64_t width) {
  check_devices("copy_columns", dst, src);
  const int64_t ws = src.rank() ? src.dim(-1) : 0, wd = dst.rank() ? dst.dim(-1) : 0;
  TANDEM_CHECK(src.dtype() == dst.dtype() && ws > 0 && wd > 0 && src.numel() / ws == dst.numel() / wd,
               "copy_columns: src ", shape_str(src.shape()), " ", dtype_name(src.dtype()), " and dst ",
               shape_str(dst.shape()), " ", dtype_name(dst.dtype()), " need the same rows and dtype");
  TANDEM_CHECK(width >= 0 && src_col >= 0 && dst_col >= 0 && src_col + width <= ws && dst_col + width <= wd,
               "copy_columns: columns [", src_col, ", ", src_col + width, ") of ", ws, " into [", dst_col, ", ",
               dst_col + width, ") of ", wd);
  TANDEM_CHECK(!src.shares_storage(dst), "copy_columns: src and dst share memory");
  return backend_of("copy_columns", dst).copy_columns(src, src_col, dst, dst_col, width);
}

void cast(const Tensor& src, const Tensor& dst) {
  check_devices("cast", dst, src);
  TANDEM_CHECK(src.numel() == dst.numel(), "cast: src ", shape_str(src.shape()), " and dst ", shape_str(dst.shape()),
               " differ in size");
  TANDEM_CHECK(is_float(src.dtype()) && is_float(dst.dtype()), "cast: src ", shape_str(src.shape()), " holds ",
               dtype_name(src.dtype()), " and dst ", shape_str(dst.shape()), " holds ", dtype_name(dst.dtype()),
               "; casts go between float dtypes (f32, bf16, f16)");
  return backend_of("cast", dst).cast(src, dst);
}

}  // namespace tandem::ops
