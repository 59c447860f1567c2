// The op front end of the Llama-family decoders' ops (RMSNorm, over rows and per head, rotary embeddings, SwiGLU,
// grouped-query attention): the checks of ops.h's contract, then the op of the device kind's table, as ops.cc does for
// the rest.
#include <climits>
#include <initializer_list>

#include "tandem/ops/op_checks.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
using namespace checks;
namespace {
// An output that may be the input itself (in place) but must not overlap it otherwise: a partial overlap would read
// elements the op has already overwritten.
void check_same_or_apart(const char* op, const char* out_name, const Tensor& out, const char* in_name,
                         const Tensor& in) {
  TANDEM_CHECK(!overlaps(out, in) || (out.raw() == in.raw() && out.nbytes() == in.nbytes()), op, ": ", out_name, " ",
               shape_str(out.shape()), " partially overlaps ", in_name, " ", shape_str(in.shape()),
               "; pass the same tensor for in-place use or separate memory");
}

void check_apart(const char* op, const char* out_name, const Tensor& out, std::initializer_list<Named> inputs) {
  for (const auto& [name, t] : inputs)
    TANDEM_CHECK(!overlaps(out, t), op, ": ", out_name, " ", shape_str(out.shape()), " shares memory with ", name, " ",
                 shape_str(t.shape()), "; give it its own memory");
}
}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd, float eps) {
  const char* op = "rmsnorm_forward";
  check_devices(op, y, x, gamma, rstd);
  check_compute(op, {{"x", x}, {"gamma", gamma}, {"y", y}});
  check_f32(op, "rstd", rstd);
  check_same_shape(op, "x", x, "y", y);
  check_channels(op, "gamma", gamma, x);
  check_per_row(op, "rstd", rstd, x);
  TANDEM_CHECK(eps >= 0.0f, op, ": eps ", eps, " is negative");
  check_same_or_apart(op, "y", y, "x", x);
  check_apart(op, "y", y, {{"gamma", gamma}, {"rstd", rstd}});
  check_apart(op, "rstd", rstd, {{"x", x}, {"gamma", gamma}});
  return backend_of(op, y).rmsnorm_forward(x, gamma, y, rstd, eps);
}

namespace {
// rmsnorm_backward's checks, and with dres those of rmsnorm_backward_add.
void check_rmsnorm_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                            const Tensor* dres, const Tensor& dx, const Tensor& dgamma) {
  check_devices(op, dx, dy, x, gamma, rstd, dgamma);
  check_compute(op, {{"dy", dy}, {"x", x}, {"gamma", gamma}, {"dx", dx}});
  check_f32(op, "rstd", rstd);
  check_f32(op, "dgamma", dgamma);
  check_same_shape(op, "x", x, "dy", dy);
  check_same_shape(op, "x", x, "dx", dx);
  check_channels(op, "gamma", gamma, x);
  check_channels(op, "dgamma", dgamma, x);
  check_per_row(op, "rstd", rstd, x);
  check_same_or_apart(op, "dx", dx, "dy", dy);
  check_apart(op, "dx", dx, {{"x", x}, {"gamma", gamma}, {"rstd", rstd}, {"dgamma", dgamma}});
  check_apart(op, "dgamma", dgamma, {{"dy", dy}, {"x", x}, {"gamma", gamma}, {"rstd", rstd}});
  if (!dres) return;
  check_devices(op, dx, *dres);
  check_compute(op, {{"x", x}, {"dres", *dres}});
  check_same_shape(op, "x", x, "dres", *dres);
  check_apart(op, "dx", dx, {{"dres", *dres}});
  check_apart(op, "dgamma", dgamma, {{"dres", *dres}});
}
}  // namespace

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dgamma) {
  check_rmsnorm_backward("rmsnorm_backward", dy, x, gamma, rstd, nullptr, dx, dgamma);
  return backend_of("rmsnorm_backward", dx).rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma);
}

void rmsnorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                          const Tensor& dres, const Tensor& dx, const Tensor& dgamma) {
  check_rmsnorm_backward("rmsnorm_backward_add", dy, x, gamma, rstd, &dres, dx, dgamma);
  return backend_of("rmsnorm_backward_add", dx).rmsnorm_backward_add(dy, x, gamma, rstd, dres, dx, dgamma);
}

namespace {
// x and y (B, T, ...) with rows of W elements, cos and sin (T_max, D/2) f32, `heads` D-wide heads rotated per row.
void check_rotary(const char* op, const char* in_name, const Tensor& in, const Tensor& cos, const Tensor& sin,
                  int heads, const char* out_name, const Tensor& out) {
  check_devices(op, out, in, cos, sin);
  check_compute(op, {{in_name, in}, {out_name, out}});
  check_f32(op, "cos", cos);
  check_f32(op, "sin", sin);
  check_same_shape(op, in_name, in, out_name, out);
  TANDEM_CHECK(in.rank() >= 3, op, ": ", in_name, " ", shape_str(in.shape()),
               " is not (B, T, ...) with the heads of each position in the dims after T");
  TANDEM_CHECK(cos.rank() == 2 && cos.dim(1) > 0, op, ": cos ", shape_str(cos.shape()), " is not a (T_max, D/2) table");
  check_same_shape(op, "cos", cos, "sin", sin);
  TANDEM_CHECK(in.dim(1) <= cos.dim(0), op, ": ", in_name, " ", shape_str(in.shape()), " has T = ", in.dim(1),
               " positions but the tables ", shape_str(cos.shape()), " hold ", cos.dim(0),
               "; make the tables for at least T positions");
  int64_t width = 1;  // W: the elements of one (b, t) row
  for (int i = 2; i < in.rank(); ++i) width *= in.dim(i);
  const int64_t d = 2 * cos.dim(1);
  TANDEM_CHECK(heads >= 0 && heads * d <= width, op, ": ", heads, " heads of D = ", d, " (twice the tables' ",
               cos.dim(1), " columns) do not fit the ", width, " elements per position of ", in_name, " ",
               shape_str(in.shape()));
  check_same_or_apart(op, out_name, out, in_name, in);
  check_apart(op, out_name, out, {{"cos", cos}, {"sin", sin}});
}
}  // namespace

void rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, int heads, const Tensor& y) {
  check_rotary("rotary_forward", "x", x, cos, sin, heads, "y", y);
  return backend_of("rotary_forward", y).rotary_forward(x, cos, sin, heads, y);
}

void rotary_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, int heads, const Tensor& dx) {
  check_rotary("rotary_backward", "dy", dy, cos, sin, heads, "dx", dx);
  return backend_of("rotary_backward", dx).rotary_backward(dy, cos, sin, heads, dx);
}

namespace {
// `in` and `out` (N, W), q_gain and k_gain (D), rstd (N, H + Hkv) f32: H + Hkv heads of D fit in a row of W.
void check_head_norm(const char* op, const char* in_name, const Tensor& in, const Tensor& q_gain, const Tensor& k_gain,
                     int heads, int kv_heads, const Tensor& rstd, const char* out_name, const Tensor& out) {
  check_compute(op, {{in_name, in}, {"q_gain", q_gain}, {"k_gain", k_gain}, {out_name, out}});
  check_f32(op, "rstd", rstd);
  check_same_shape(op, in_name, in, out_name, out);
  TANDEM_CHECK(in.rank() >= 2, op, ": ", in_name, " ", shape_str(in.shape()), " is not (N, W) rows of heads");
  TANDEM_CHECK(q_gain.rank() == 1 && q_gain.dim(0) > 0, op, ": q_gain ", shape_str(q_gain.shape()),
               " is not a (D) gain");
  check_same_shape(op, "q_gain", q_gain, "k_gain", k_gain);
  const int64_t d = q_gain.dim(0), normed = static_cast<int64_t>(heads) + kv_heads;
  TANDEM_CHECK(heads >= 0 && kv_heads >= 0 && normed * d <= cols_of(in), op, ": ", heads, " query and ", kv_heads,
               " key heads of D = ", d, " (the gains' size) do not fit the ", cols_of(in), " columns of ", in_name, " ",
               shape_str(in.shape()));
  TANDEM_CHECK(rstd.shape() == Shape({rows_of(in), normed}), op, ": rstd ", shape_str(rstd.shape()),
               " is not (N, H + Hkv) = ", shape_str({rows_of(in), normed}));
  check_same_or_apart(op, out_name, out, in_name, in);
  check_apart(op, out_name, out, {{"q_gain", q_gain}, {"k_gain", k_gain}, {"rstd", rstd}});
}

// sums, when defined, (N, H + Hkv) f32 as rstd, over heads of `width` columns of which a row holds D; apart from `out`.
void check_head_sums(const char* op, const Tensor& sums, int64_t width, const Tensor& rstd, const Tensor& q_gain,
                     const Tensor& out) {
  if (!sums.defined()) {
    TANDEM_CHECK(width == 0, op, ": width ", width, " without sums");
    return;
  }
  check_f32(op, "sums", sums);
  check_same_shape(op, "rstd", rstd, "sums", sums);
  TANDEM_CHECK(width >= q_gain.dim(0), op, ": heads of width ", width, " narrower than the D = ", q_gain.dim(0),
               " columns a row holds");
  check_apart(op, "sums", sums, {{"out", out}, {"rstd", rstd}});
}
}  // namespace

void head_norm_forward(const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, int heads, int kv_heads,
                       const Tensor& y, const Tensor& rstd, float eps, const Tensor& sums, int64_t width) {
  const char* op = "head_norm_forward";
  check_devices(op, y, x, q_gain, k_gain, rstd);
  if (sums.defined()) check_devices(op, y, sums);
  check_head_norm(op, "x", x, q_gain, k_gain, heads, kv_heads, rstd, "y", y);
  check_head_sums(op, sums, width, rstd, q_gain, y);
  TANDEM_CHECK(eps >= 0.0f, op, ": eps ", eps, " is negative");
  check_apart(op, "rstd", rstd, {{"x", x}, {"q_gain", q_gain}, {"k_gain", k_gain}});
  return backend_of(op, y).head_norm_forward(x, q_gain, k_gain, heads, kv_heads, y, rstd, eps, sums, width);
}

void head_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, int heads,
                        int kv_heads, const Tensor& rstd, const Tensor& dx, const Tensor& dq_gain,
                        const Tensor& dk_gain, const Tensor& sums, int64_t width) {
  const char* op = "head_norm_backward";
  check_devices(op, dx, dy, x, q_gain, k_gain, rstd, dq_gain, dk_gain);
  if (sums.defined()) check_devices(op, dx, sums);
  check_head_norm(op, "dy", dy, q_gain, k_gain, heads, kv_heads, rstd, "dx", dx);
  check_head_sums(op, sums, width, rstd, q_gain, dx);
  check_compute(op, {{"dy", dy}, {"x", x}});
  check_same_shape(op, "x", x, "dy", dy);
  for (const auto& [name, g] : {Named{"dq_gain", dq_gain}, Named{"dk_gain", dk_gain}}) {
    check_f32(op, name, g);
    check_same_shape(op, "q_gain", q_gain, name, g);
    check_apart(op, name, g,
                {{"dy", dy}, {"x", x}, {"q_gain", q_gain}, {"k_gain", k_gain}, {"rstd", rstd}, {"dx", dx}});
  }
  check_apart(op, "dq_gain", dq_gain, {{"dk_gain", dk_gain}});
  check_apart(op, "dx", dx, {{"x", x}});
  if (sums.defined())
    for (const auto& [name, g] : {Named{"dq_gain", dq_gain}, Named{"dk_gain", dk_gain}})
      check_apart(op, name, g, {{"sums", sums}});
  return backend_of(op, dx).head_norm_backward(dy, x, q_gain, k_gain, heads, kv_heads, rstd, dx, dq_gain, dk_gain, sums,
                                               width);
}

void head_norm_sums(const Tensor& a, const Tensor& b, const Tensor& q_gain, const Tensor& k_gain, int heads,
                    int kv_heads, int64_t d, const Tensor& sums) {
  const char* op = "head_norm_sums";
  check_devices(op, sums, a, b);
  check_compute(op, {{"a", a}, {"b", b}});
  check_same_shape(op, "a", a, "b", b);
  check_f32(op, "sums", sums);
  TANDEM_CHECK(q_gain.defined() == k_gain.defined(), op, ": q_gain and k_gain are both given or both not");
  if (q_gain.defined()) {
    check_devices(op, sums, q_gain, k_gain);
    check_compute(op, {{"a", a}, {"q_gain", q_gain}, {"k_gain", k_gain}});
    TANDEM_CHECK(q_gain.shape() == Shape({d}) && k_gain.shape() == Shape({d}), op, ": gains ",
                 shape_str(q_gain.shape()), " and ", shape_str(k_gain.shape()), " are not (D) = (", d, ")");
  }
  TANDEM_CHECK(a.rank() >= 2, op, ": a ", shape_str(a.shape()), " is not (N, W) rows of heads");
  const int64_t normed = static_cast<int64_t>(heads) + kv_heads;
  TANDEM_CHECK(d > 0 && heads >= 0 && kv_heads >= 0 && normed * d <= cols_of(a), op, ": ", heads, " query and ",
               kv_heads, " key heads of D = ", d, " do not fit the ", cols_of(a), " columns of a ",
               shape_str(a.shape()));
  TANDEM_CHECK(sums.shape() == Shape({rows_of(a), normed}), op, ": sums ", shape_str(sums.shape()),
               " is not (N, H + Hkv) = ", shape_str({rows_of(a), normed}));
  check_apart(op, "sums", sums, {{"a", a}, {"b", b}});
  return backend_of(op, sums).head_norm_sums(a, b, q_gain, k_gain, heads, kv_heads, d, sums);
}

namespace {
// gate_up (N, 2F) with gate | up halves of each row; `half` (N, F) is y or dy.
void check_swiglu(const char* op, const Tensor& gate_up, const char* half_name, const Tensor& half) {
  TANDEM_CHECK(gate_up.rank() >= 1 && cols_of(gate_up) % 2 == 0, op, ": gate_up ", shape_str(gate_up.shape()),
               " is not (N, 2F): its last dim must hold gate and up halves");
  TANDEM_CHECK(
      half.rank() == gate_up.rank() && rows_of(half) == rows_of(gate_up) && cols_of(half) == cols_of(gate_up) / 2, op,
      ": ", half_name, " ", shape_str(half.shape()), " is not (N, F) for gate_up ", shape_str(gate_up.shape()),
      " (N, 2F)");
}
}  // namespace

void swiglu_forward(const Tensor& gate_up, const Tensor& y) {
  const char* op = "swiglu_forward";
  check_devices(op, y, gate_up);
  check_compute(op, {{"gate_up", gate_up}, {"y", y}});
  check_swiglu(op, gate_up, "y", y);
  check_apart(op, "y", y, {{"gate_up", gate_up}});
  return backend_of(op, y).swiglu_forward(gate_up, y);
}

void swiglu_backward(const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up) {
  const char* op = "swiglu_backward";
  check_devices(op, dgate_up, gate_up, dy);
  check_compute(op, {{"gate_up", gate_up}, {"dy", dy}, {"dgate_up", dgate_up}});
  check_swiglu(op, gate_up, "dy", dy);
  check_same_shape(op, "gate_up", gate_up, "dgate_up", dgate_up);
  check_same_or_apart(op, "dgate_up", dgate_up, "gate_up", gate_up);
  check_apart(op, "dgate_up", dgate_up, {{"dy", dy}});
  return backend_of(op, dgate_up).swiglu_backward(gate_up, dy, dgate_up);
}

namespace {
void check_attention_gqa(const char* op, const Tensor& qkv, int heads, int kv_heads, const Tensor& y,
                         const Tensor& lse) {
  check_compute(op, {{"qkv", qkv}, {"y", y}});
  check_f32(op, "lse", lse);
  TANDEM_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, op, ": ", heads, " query heads and ", kv_heads,
               " key/value heads: both must be positive and the query heads a multiple of the key/value heads");
  const int64_t parts = static_cast<int64_t>(heads) + 2 * static_cast<int64_t>(kv_heads);
  TANDEM_CHECK(qkv.rank() == 3 && qkv.dim(2) % parts == 0, op, ": qkv ", shape_str(qkv.shape()),
               " is not (B, T, (H + 2 Hkv) D) with H = ", heads, " and Hkv = ", kv_heads);
  const int64_t b = qkv.dim(0), t = qkv.dim(1), d = qkv.dim(2) / parts;
  TANDEM_CHECK(y.shape() == Shape({b, t, heads * d}), op, ": y ", shape_str(y.shape()),
               " is not (B, T, H*D) = ", shape_str({b, t, heads * d}), " for qkv ", shape_str(qkv.shape()));
  TANDEM_CHECK(lse.shape() == Shape({b, heads, t}), op, ": lse ", shape_str(lse.shape()),
               " is not (B, H, T) = ", shape_str({b, heads, t}));
  TANDEM_CHECK(t <= INT_MAX && qkv.dim(2) <= INT_MAX, op, ": qkv ", shape_str(qkv.shape()),
               " exceeds the 32-bit BLAS interface");
}
}  // namespace

void attention_gqa_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                           int64_t block_bytes) {
  const char* op = "attention_gqa_forward";
  check_devices(op, y, qkv, lse);
  check_attention_gqa(op, qkv, heads, kv_heads, y, lse);
  check_apart(op, "y", y, {{"qkv", qkv}, {"lse", lse}});
  check_apart(op, "lse", lse, {{"qkv", qkv}});
  TANDEM_CHECK(block_bytes >= 0, op, ": block_bytes ", block_bytes, " is negative");
  return backend_of(op, y).attention_gqa_forward(qkv, heads, kv_heads, y, lse, block_bytes);
}

void attention_gqa_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                            const Tensor& dy, const Tensor& dqkv, int64_t block_bytes) {
  const char* op = "attention_gqa_backward";
  check_devices(op, dqkv, qkv, y, lse, dy);
  check_attention_gqa(op, qkv, heads, kv_heads, y, lse);
  check_compute(op, {{"qkv", qkv}, {"y", y}, {"dy", dy}, {"dqkv", dqkv}});
  check_same_shape(op, "y", y, "dy", dy);
  check_same_shape(op, "qkv", qkv, "dqkv", dqkv);
  check_apart(op, "dqkv", dqkv, {{"qkv", qkv}, {"y", y}, {"lse", lse}, {"dy", dy}});
  TANDEM_CHECK(block_bytes >= 0, op, ": block_bytes ", block_bytes, " is negative");
  return backend_of(op, dqkv).attention_gqa_backward(qkv, heads, kv_heads, y, lse, dy, dqkv, block_bytes);
}

namespace {
void check_documents(const char* op, const Tensor& documents, const Tensor& qkv) {
  check_dtype(op, "documents", documents, DType::I32);
  TANDEM_CHECK(documents.shape() == Shape({qkv.dim(0), qkv.dim(1)}), op, ": documents ", shape_str(documents.shape()),
               " is not (B, T) = ", shape_str({qkv.dim(0), qkv.dim(1)}), " for qkv ", shape_str(qkv.shape()));
}
}  // namespace

void attention_gqa_documents_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                                     const Tensor& y, const Tensor& lse) {
  const char* op = "attention_gqa_documents_forward";
  check_devices(op, y, qkv, documents, lse);
  check_attention_gqa(op, qkv, heads, kv_heads, y, lse);
  check_documents(op, documents, qkv);
  check_apart(op, "y", y, {{"qkv", qkv}, {"lse", lse}});
  check_apart(op, "lse", lse, {{"qkv", qkv}});
  return backend_of(op, y).attention_gqa_documents_forward(qkv, heads, kv_heads, documents, y, lse);
}

void attention_gqa_documents_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                                      const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dqkv) {
  const char* op = "attention_gqa_documents_backward";
  check_devices(op, dqkv, qkv, documents, y, lse, dy);
  check_attention_gqa(op, qkv, heads, kv_heads, y, lse);
  check_documents(op, documents, qkv);
  check_compute(op, {{"qkv", qkv}, {"y", y}, {"dy", dy}, {"dqkv", dqkv}});
  check_same_shape(op, "y", y, "dy", dy);
  check_same_shape(op, "qkv", qkv, "dqkv", dqkv);
  check_apart(op, "dqkv", dqkv, {{"qkv", qkv}, {"y", y}, {"lse", lse}, {"dy", dy}});
  return backend_of(op, dqkv).attention_gqa_documents_backward(qkv, heads, kv_heads, documents, y, lse, dy, dqkv);
}

void dropout(const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t stream, int64_t row0, int64_t width,
             int64_t col0) {
  const char* op = "dropout";
  check_devices(op, y, x);
  check_compute(op, {{"x", x}, {"y", y}});
  check_same_shape(op, "x", x, "y", y);
  TANDEM_CHECK(p >= 0.0f && p < 1.0f, op, ": probability ", p, " outside [0, 1)");
  TANDEM_CHECK(row0 >= 0 && col0 >= 0 && col0 + cols_of(x) <= width, op, ": columns [", col0, ", ", col0 + cols_of(x),
               ") of a ", width, "-wide tensor at row ", row0);
  TANDEM_CHECK(!overlaps(x, y) || x.raw() == y.raw(), op, ": y partially overlaps x");
  return backend_of(op, y).dropout(x, y, p, seed, stream, row0, width, col0);
}

}  // namespace tandem::ops
