// CPU FP8: the largest magnitude of a tensor or of each of its blocks, and its rounding to e4m3 or e5m2 with their
// power-of-two scales (ops.h, "FP8"; the scale and the blocks' layout from fp8_scale.h, the rounding from
// core/dtype.h). fp8_matmul is in gemm.cc, beside the product it runs on.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/fp8_scale.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// The largest |x| of each block of the output orientation's grid g: x (R, C) itself, or x^T when `transposed`.
template <class T>
void amax_kernel(const Tensor& x, const Fp8ScaleGrid& g, bool transposed, float* out) {
  const T* p = elems<T>(x);  // (R, C)
  const int64_t r = rows_of(x), c = cols_of(x);
  const int64_t blocks = g.rows * g.cols;
#pragma omp parallel for schedule(static) if (worth_parallel(x.numel()) && blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t bi = b / g.cols, bj = b % g.cols;
    // The block's rows and columns in the output orientation, then in x's.
    const int64_t oi0 = bi * g.block_rows, oi1 = std::min(oi0 + g.block_rows, transposed ? c : r);
    const int64_t oj0 = bj * g.block_cols, oj1 = std::min(oj0 + g.block_cols, transposed ? r : c);
    float best = 0.0f;
    bool nan = false;
    for (int64_t oi = oi0; oi < oi1; ++oi)
      for (int64_t oj = oj0; oj < oj1; ++oj) {
        const float v = std::fabs(load(p, transposed ? oj * c + oi : oi * c + oj));
        if (std::isnan(v)) nan = true;
        best = std::max(best, v);
      }
    out[g.at(bi, bj)] = nan ? std::numeric_limits<float>::quiet_NaN() : best;
  }
}

// One whole-tensor amax over all cores.
template <class T>
float amax_whole(const Tensor& x) {
  const T* p = elems<T>(x);  // (n)
  const int64_t n = x.numel();
  float best = 0.0f;
  bool nan = false;
#pragma omp parallel for schedule(static) reduction(max : best) reduction(|| : nan) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fabs(load(p, i));
    if (std::isnan(v)) nan = true;
    best = std::max(best, v);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : best;
}

// q (R, C) and/or q_t (C, R) of x (R, C), element (i, j) times the scale of its block: of q's grid g (blocks of x),
// or of q_t's (blocks of x^T); one scale serves both.
template <class T>
void quantize_kernel(const Tensor& x, const Fp8ScaleGrid& g, const float* scales, const Tensor& q, const Tensor& q_t) {
  const T* in = elems<T>(x);  // (R, C)
  const int64_t r = rows_of(x), c = cols_of(x);
  const DType format = q.defined() ? q.dtype() : q_t.dtype();
  uint8_t (*round)(float) = format == DType::E4M3 ? &f32_to_e4m3 : &f32_to_e5m2;
  auto* out = q.defined() ? static_cast<uint8_t*>(q.raw()) : nullptr;        // (R, C)
  auto* out_t = q_t.defined() ? static_cast<uint8_t*>(q_t.raw()) : nullptr;  // (C, R)
  const bool single = g.single();
#pragma omp parallel for schedule(static) if (worth_parallel(r * c, 8))
  for (int64_t i = 0; i < r; ++i) {
    // Row i's blocks: along q's grid its row of blocks is i / block_rows, along q_t's its column i / block_cols.
    const int64_t q_row = single ? 0 : i / g.block_rows, q_t_col = single ? 0 : i / g.block_cols;
    for (int64_t j = 0; j < c; ++j) {
      const float v = load(in, i * c + j);
      if (out) out[i * c + j] = round(v * scales[single ? 0 : g.at(q_row, j / g.block_cols)]);
      if (out_t) out_t[j * r + i] = round(v * scales[single ? 0 : g.at(j / g.block_rows, q_t_col)]);
    }
  }
}

}  // namespace

void amax(const Tensor& x, const Tensor& amax, Fp8Blocks blocks, bool transposed) {
  const int64_t r = rows_of(x), c = cols_of(x);
  const Fp8ScaleGrid g = transposed ? fp8_scale_grid(c, r, blocks) : fp8_scale_grid(r, c, blocks);
  if (g.single()) {
    amax.f32()[0] = visit_float(x.dtype(), [&](auto tag) { return amax_whole<decltype(tag)>(x); });
    return;
  }
  std::fill(amax.f32(), amax.f32() + g.count, 0.0f);
  visit_float(x.dtype(), [&](auto tag) { amax_kernel<decltype(tag)>(x, g, transposed, amax.f32()); });
}

void fp8_quantize(const Tensor& x, const Tensor& amax, const Tensor& q, const Tensor& q_t, const Tensor& inv_scale,
                  Fp8Blocks blocks) {
  const DType format = q.defined() ? q.dtype() : q_t.dtype();
  const int64_t r = rows_of(x), c = cols_of(x);
  const Fp8ScaleGrid g = q.defined() ? fp8_scale_grid(r, c, blocks) : fp8_scale_grid(c, r, blocks);
  const int max_exp = format == DType::E4M3 ? kE4M3MaxExp : kE5M2MaxExp;
  std::vector<float> scales(static_cast<size_t>(g.count), 1.0f);
  for (int64_t k = 0; k < g.count; ++k) {
    bool finite = true;
    const int e = fp8_scale_exponent(amax.f32()[k], max_exp, &finite);
    inv_scale.f32()[k] = finite ? fp8_pow2(-e) : std::numeric_limits<float>::quiet_NaN();
    scales[static_cast<size_t>(k)] = fp8_pow2(e);
  }
  visit_float(x.dtype(), [&](auto tag) { quantize_kernel<decltype(tag)>(x, g, scales.data(), q, q_t); });
}

}  // namespace tandem::ops::cpu
