// The FP8 ops' front end (ops.h, "FP8"): amax, fp8_quantize and fp8_matmul checked against their contracts, then
// dispatched as every op is (ops.cc).
#include <climits>

#include "tandem/ops/op_checks.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
using namespace checks;

namespace {
bool is_fp8(DType t) { return t == DType::E4M3 || t == DType::E5M2; }

// t (count) f32: the amaxes or inverse scales of the blocks of grid g (fp8_scale.h).
void check_scales(const char* op, const char* name, const Tensor& t, const Fp8ScaleGrid& g) {
  check_f32(op, name, t);
  TANDEM_CHECK(t.numel() == g.count, op, ": ", name, " ", shape_str(t.shape()), " must hold ", g.count,
               g.count == 1 ? " element" : " elements (one per block, as fp8_scale_grid lays them out)");
}

void check_blocks(const char* op, const char* name, Fp8Blocks b) {
  TANDEM_CHECK(b.rows >= 0 && b.cols >= 0, op, ": ", name, " blocks ", b.rows, " x ", b.cols, " are negative");
}
}  // namespace

void amax(const Tensor& x, const Tensor& amax, Fp8Blocks blocks, bool transposed) {
  const char* op = "amax";
  check_devices(op, amax, x);
  TANDEM_CHECK(is_float(x.dtype()), op, ": x holds ", dtype_name(x.dtype()), ", not a float dtype");
  check_blocks(op, "amax", blocks);
  const int64_t r = rows_of(x), c = cols_of(x);
  check_scales(op, "amax", amax, transposed ? fp8_scale_grid(c, r, blocks) : fp8_scale_grid(r, c, blocks));
  return backend_of(op, amax).amax(x, amax, blocks, transposed);
}

void fp8_quantize(const Tensor& x, const Tensor& amax, const Tensor& q, const Tensor& q_t, const Tensor& inv_scale,
                  Fp8Blocks blocks) {
  const char* op = "fp8_quantize";
  TANDEM_CHECK(q.defined() || q_t.defined(), op, ": neither q nor q_t given");
  check_devices(op, inv_scale, x, amax);
  check_compute(op, {{"x", x}});
  check_blocks(op, "the output's", blocks);
  const int64_t r = rows_of(x), c = cols_of(x);
  const Fp8ScaleGrid g = q.defined() ? fp8_scale_grid(r, c, blocks) : fp8_scale_grid(c, r, blocks);
  TANDEM_CHECK(g.single() || !q.defined() || !q_t.defined(), op, ": blocks ", blocks.rows, " x ", blocks.cols,
               " give more than one scale, so q and q_t (whose blocks differ) are quantized one call each");
  check_scales(op, "amax", amax, g);
  check_scales(op, "inv_scale", inv_scale, g);
  TANDEM_CHECK(!overlaps(amax, inv_scale), op, ": inv_scale shares memory with amax");
  for (const auto& [name, t, rows, cols] :
       {std::tuple<const char*, const Tensor&, int64_t, int64_t>{"q", q, r, c}, {"q_t", q_t, c, r}}) {
    if (!t.defined()) continue;
    check_devices(op, inv_scale, t);
    TANDEM_CHECK(is_fp8(t.dtype()), op, ": ", name, " holds ", dtype_name(t.dtype()), ", not e4m3 or e5m2");
    TANDEM_CHECK(rows_of(t) == rows && cols_of(t) == cols, op, ": ", name, " ", shape_str(t.shape()), " is not (", rows,
                 ", ", cols, ") for x ", shape_str(x.shape()));
  }
  TANDEM_CHECK(!q.defined() || !q_t.defined() || q.dtype() == q_t.dtype(), op, ": q holds ", dtype_name(q.dtype()),
               " and q_t ", dtype_name(q_t.dtype()), "; one format for both");
  return backend_of(op, inv_scale).fp8_quantize(x, amax, q, q_t, inv_scale, blocks);
}

void fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b, const Tensor& b_inv_scale,
                const Tensor& bias, const Tensor& c, const Tensor& d, bool fast_accum, Fp8Blocks a_blocks,
                Fp8Blocks b_blocks) {
  const char* op = "fp8_matmul";
  check_devices(op, d, a, a_inv_scale, b, b_inv_scale);
  for (const Tensor* t : {&bias, &c})
    if (t->defined()) check_devices(op, d, *t);
  TANDEM_CHECK(is_fp8(a.dtype()) && is_fp8(b.dtype()), op, ": a holds ", dtype_name(a.dtype()), " and b ",
               dtype_name(b.dtype()), "; both must be e4m3 or e5m2");
  TANDEM_CHECK(a.dtype() == DType::E4M3 || b.dtype() == DType::E4M3, op,
               ": a and b both e5m2; one of them must be e4m3 (the tensor cores take no e5m2 x e5m2)");
  check_compute(op, {{"d", d}});
  const int64_t m = rows_of(a), k = cols_of(a), n = rows_of(b);
  check_blocks(op, "a's", a_blocks);
  check_blocks(op, "b's", b_blocks);
  check_scales(op, "a_inv_scale", a_inv_scale, fp8_scale_grid(m, k, a_blocks));
  check_scales(op, "b_inv_scale", b_inv_scale, fp8_scale_grid(n, k, b_blocks));
  TANDEM_CHECK(cols_of(b) == k && rows_of(d) == m && cols_of(d) == n, op, ": a ", shape_str(a.shape()), " @ b ",
               shape_str(b.shape()), "^T does not fit d ", shape_str(d.shape()));
  for (int64_t v : {m, n, k}) TANDEM_CHECK(v <= INT_MAX, op, ": dimension ", v, " exceeds the 32-bit BLAS interface");
  if (bias.defined()) {
    check_dtype(op, "bias", bias, d.dtype());
    check_channels(op, "bias", bias, d);
  }
  if (c.defined()) {
    check_dtype(op, "c", c, d.dtype());
    TANDEM_CHECK(rows_of(c) == m && cols_of(c) == n, op, ": c ", shape_str(c.shape()), " and d ", shape_str(d.shape()),
                 " differ in shape");
    TANDEM_CHECK(!overlaps(c, d) || c.raw() == d.raw(), op, ": c and d overlap without being one tensor");
  }
  for (const Tensor* t : {&a, &b, &bias})
    TANDEM_CHECK(!t->defined() || !overlaps(d, *t), op, ": d ", shape_str(d.shape()), " shares memory with an input");
  return backend_of(op, d).fp8_matmul(a, a_inv_scale, b, b_inv_scale, bias, c, d, fast_accum, a_blocks, b_blocks);
}

}  // namespace tandem::ops
