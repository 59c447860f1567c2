// CPU matrix product: matmul through OpenBLAS cblas_sgemm on the 2-D views of its operands, and the linear layer's
// ops built from it (linear_forward: the product then add_bias then add; linear_weight_grad: the product then
// bias_backward), so their results are those ops' bits.
// OpenBLAS threads partition the output, not the K sum, so results do not depend on its thread count.
// This OpenBLAS has no bf16 or f16 GEMM: 16-bit a and b are widened into fp32 scratch, the product is formed in
// fp32 (in c itself when c is f32, else in scratch) and rounded into c once.
// A row of c should not depend on the rows beside it in the call (the micro-batch, hence the layout). OpenBLAS's
// AVX-512 builds compute a product of at most 100^3 multiply-adds with kernels of their own, whose sums run in another
// order than its blocked kernel's, so one row of a layer came out differently in a call of 16 rows and in one of 64. A
// product with a untransposed that small is computed on a padded with zero rows to just above that size, so every such
// call runs the blocked kernel on the same row count (tests/ops/test_ops_gemm.cc checks it). Past that size the bits
// are OpenBLAS's: its Haswell kernels (which it also picks on AMD Zen 4) give a row bits that depend on the call's row
// count and the row's place in it, so layouts equal one device to the bit only where every call keeps its rows (dp,
// pp and ZeRO keep the micro-batch; tp has bounds). With a transposed (the weight gradient, summed over the batch rows)
// the rows of c are the layer's, the same in every layout.
#include <cblas.h>

#include <algorithm>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// dst (n) = src (n) widened to fp32.
template <class T>
void widen(const T* src, float* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) dst[i] = load(src, i);
}

// dst (n) = src (n) rounded to T.
template <class T>
void narrow(const float* src, T* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) store(dst, i, src[i]);
}

// The rows the product is computed on (see the file's opening): `m`, or for a small product with a untransposed, the
// fewest rows that take it past OpenBLAS's 100^3 multiply-adds.
int64_t padded_rows(int64_t m, int64_t n, int64_t k, bool trans_a) {
  constexpr int64_t kSmallProduct = 1000000;
  if (trans_a || m * n * k > kSmallProduct) return m;
  return kSmallProduct / (n * k) + 1;
}

// `t` (rows, cols) as an fp32 (padded_rows, cols) tensor: itself when it is f32 and needs no padding, else a copy in
// scratch on its device, widened when `read` (the padding rows zero).
Tensor as_f32(const Tensor& t, bool read, int64_t padded_rows) {
  const int64_t rows = rows_of(t), cols = cols_of(t);
  if (t.dtype() == DType::F32 && padded_rows == rows) return t;
  Tensor wide = Tensor::empty({padded_rows, cols}, DType::F32, t.device(), "matmul scratch");
  if (read) visit_float(t.dtype(), [&](auto tag) { widen(elems<decltype(tag)>(t), wide.f32(), t.numel()); });
  if (padded_rows > rows) wide.rows(rows, padded_rows - rows).fill_zero();
  return wide;
}

// out (M, N) *= beta with an empty K sum. BLAS implementations disagree on whether they still apply beta, so do it
// here. beta == 0 must not read c (it may hold uninitialised memory), hence the explicit zero fill.
void scale_only(const Tensor& c, float beta) {
  if (beta == 0.0f) {
    c.fill_zero();
    return;
  }
  visit_float(c.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = elems<T>(c);  // (M, N)
    for (int64_t i = 0; i < c.numel(); ++i) store(out, i, load(out, i) * beta);
  });
}

}  // namespace

// The fp32 copies as_f32 makes: a, b and c each when 16-bit, a and c when padded, all live through the product.
int64_t matmul_scratch(const ScratchContext&, const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool,
                       float) {
  const int64_t m = rows_of(c), n = cols_of(c), k = trans_a ? rows_of(a) : cols_of(a);
  if (m == 0 || n == 0 || k == 0) return 0;
  const int64_t rows = padded_rows(m, n, k, trans_a);
  int64_t bytes = 0;
  for (const Tensor* t : {&a, &b, &c}) {
    const bool padded = t != &b && !(t == &a && trans_a) && rows > m;
    if (t->dtype() != DType::F32 || padded) bytes += (padded ? rows : rows_of(*t)) * cols_of(*t) * 4;
  }
  return bytes;
}

void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float beta) {
  const int64_t m = rows_of(c), n = cols_of(c);
  const int64_t k = trans_a ? rows_of(a) : cols_of(a);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_only(c, beta);
    return;
  }
  const int64_t rows = padded_rows(m, n, k, trans_a);
  const Tensor a32 = as_f32(a, true, trans_a ? rows_of(a) : rows), b32 = as_f32(b, true, rows_of(b));
  // c's existing values matter only when beta != 0; they are read as fp32, as beta's contract says.
  const Tensor c32 = as_f32(c, beta != 0.0f, rows);  // (rows, N)
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k), 1.0f, a32.f32(),
              static_cast<int>(cols_of(a)), b32.f32(), static_cast<int>(cols_of(b)), beta, c32.f32(),
              static_cast<int>(n));
  if (c32.shares_storage(c)) return;
  if (c.dtype() == DType::F32) {
    c.copy_from(c32.rows(0, m).view(c.shape()));
    return;
  }
  visit_float(c.dtype(), [&](auto tag) { narrow(c32.f32(), elems<decltype(tag)>(c), c.numel()); });
}

int64_t linear_forward_scratch(const ScratchContext& ctx, const Tensor& x, const Tensor& weight, const Tensor&,
                               const Tensor&, const Tensor& y) {
  return matmul_scratch(ctx, x, weight, y, false, true, 0.0f);
}

int64_t linear_weight_grad_scratch(const ScratchContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& dweight,
                                   const Tensor&) {
  return matmul_scratch(ctx, dy, x, dweight, true, false, 1.0f);
}

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                    const Tensor& y) {
  matmul(x, weight, y, false, true, 0.0f);
  const Tensor rows = y.view({rows_of(y), cols_of(y)});  // (N, out)
  if (bias.defined()) add_bias(rows, bias);
  if (residual.defined()) add(rows, residual.view(rows.shape()), rows);
}

void linear_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dweight, const Tensor& dbias) {
  matmul(dy, x, dweight, true, false, 1.0f);
  if (dbias.defined()) bias_backward(dy.view({rows_of(dy), cols_of(dy)}), dbias);
}

namespace {
// dst (rows, cols) f32 = the FP8 values of src (rows, cols), exactly.
void decode_fp8(const Tensor& src, float* dst) {
  const auto* p = static_cast<const uint8_t*>(src.raw());
  float (*decode)(uint8_t) = src.dtype() == DType::E4M3 ? &e4m3_to_f32 : &e5m2_to_f32;
  const int64_t n = src.numel();
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) dst[i] = decode(p[i]);
}

// x32 (rows, K) f32 *= the inverse scale of each element's block (blocks of x's (rows, K), fp8_scale.h): exact, the
// scales being powers of two.
void scale_blocks(float* x32, int64_t rows, int64_t k, const Tensor& inv_scale, Fp8Blocks blocks) {
  const Fp8ScaleGrid g = fp8_scale_grid(rows, k, blocks);
  const float* s = inv_scale.f32();
#pragma omp parallel for schedule(static) if (worth_parallel(rows * k))
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t bj = 0; bj < g.cols; ++bj) {
      const float scale = s[g.at(i / g.block_rows, bj)];
      for (int64_t j = bj * g.block_cols; j < std::min(k, (bj + 1) * g.block_cols); ++j) x32[i * k + j] *= scale;
    }
}
}  // namespace

// a and b decoded into fp32 and the fp32 sum (M, N), a and the sum padded as matmul pads them.
int64_t fp8_matmul_scratch(const ScratchContext&, const Tensor& a, const Tensor&, const Tensor& b, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor& d, bool, Fp8Blocks, Fp8Blocks) {
  const int64_t m = rows_of(d), n = cols_of(d), k = cols_of(a);
  if (m == 0 || n == 0) return 0;
  const int64_t rows = padded_rows(m, n, std::max<int64_t>(k, 1), false);
  return (rows * k + rows_of(b) * k + rows * n) * 4;
}

// The FP8 values are exact in fp32 and so are their products: the sum is OpenBLAS's fp32 product of the decoded
// operands, then the scales, the bias and c in fp32, rounded once into d. With one scale per operand the scales
// multiply the sum; with blocks each decoded element is scaled first (exact: powers of two), so the sum is of the
// same products. fast_accum changes nothing here.
void fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b, const Tensor& b_inv_scale,
                const Tensor& bias, const Tensor& c, const Tensor& d, bool, Fp8Blocks a_blocks, Fp8Blocks b_blocks) {
  const int64_t m = rows_of(d), n = cols_of(d), k = cols_of(a);
  if (m == 0 || n == 0) return;
  const int64_t rows = padded_rows(m, n, std::max<int64_t>(k, 1), false);
  Device& dev = d.device();
  const Tensor a32 = Tensor::empty({rows, k}, DType::F32, dev, "fp8_matmul scratch");  // (rows, K)
  const Tensor b32 = Tensor::empty({n, k}, DType::F32, dev, "fp8_matmul scratch");     // (N, K)
  const Tensor sum = Tensor::empty({rows, n}, DType::F32, dev, "fp8_matmul scratch");  // (rows, N)
  decode_fp8(a, a32.f32());
  if (rows > m) a32.rows(m, rows - m).fill_zero();
  decode_fp8(b, b32.f32());
  const bool a_single = fp8_scale_grid(m, k, a_blocks).single(), b_single = fp8_scale_grid(n, k, b_blocks).single();
  if (!a_single) scale_blocks(a32.f32(), m, k, a_inv_scale, a_blocks);
  if (!b_single) scale_blocks(b32.f32(), n, k, b_inv_scale, b_blocks);
  if (k == 0) {
    sum.fill_zero();
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a32.f32(), static_cast<int>(k), b32.f32(), static_cast<int>(k), 0.0f,
                sum.f32(), static_cast<int>(n));
  }
  const float sa = a_single ? a_inv_scale.f32()[0] : 1.0f, sb = b_single ? b_inv_scale.f32()[0] : 1.0f;
  visit_float(d.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const float* acc = sum.f32();                                 // (rows, N)
    const T* bias_p = bias.defined() ? elems<T>(bias) : nullptr;  // (N)
    const T* c_p = c.defined() ? elems<T>(c) : nullptr;           // (M, N)
    T* out = elems<T>(d);                                         // (M, N)
#pragma omp parallel for schedule(static) if (worth_parallel(m * n))
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float v = acc[i * n + j] * sa * sb;
        if (bias_p) v += load(bias_p, j);
        if (c_p) v += load(c_p, i * n + j);
        store(out, i * n + j, v);
      }
  });
}

}  // namespace tandem::ops::cpu
