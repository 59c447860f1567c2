// CPU FP8: the largest magnitude of a tensor and its rounding to e4m3 or e5m2 with the per-tensor power-of-two scale
// (ops.h, "FP8"; the scale from fp8_scale.h, the rounding from core/dtype.h). fp8_matmul is in gemm.cc, beside the
// product it runs on.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/fp8_scale.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

template <class T>
float amax_kernel(const Tensor& x) {
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

template <class T>
void quantize_kernel(const Tensor& x, float s, const Tensor& q, const Tensor& q_t) {
  const T* in = elems<T>(x);  // (R, C)
  const int64_t r = rows_of(x), c = cols_of(x);
  const DType format = q.defined() ? q.dtype() : q_t.dtype();
  uint8_t (*round)(float) = format == DType::E4M3 ? &f32_to_e4m3 : &f32_to_e5m2;
  auto* out = q.defined() ? static_cast<uint8_t*>(q.raw()) : nullptr;        // (R, C)
  auto* out_t = q_t.defined() ? static_cast<uint8_t*>(q_t.raw()) : nullptr;  // (C, R)
#pragma omp parallel for schedule(static) if (worth_parallel(r * c, 8))
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const uint8_t b = round(load(in, i * c + j) * s);
      if (out) out[i * c + j] = b;
      if (out_t) out_t[j * r + i] = b;
    }
}

}  // namespace

void amax(const Tensor& x, const Tensor& amax) {
  amax.f32()[0] = visit_float(x.dtype(), [&](auto tag) { return amax_kernel<decltype(tag)>(x); });
}

void fp8_quantize(const Tensor& x, const Tensor& amax, const Tensor& q, const Tensor& q_t, const Tensor& inv_scale) {
  const DType format = q.defined() ? q.dtype() : q_t.dtype();
  bool finite = true;
  const int e = fp8_scale_exponent(amax.f32()[0], format == DType::E4M3 ? kE4M3MaxExp : kE5M2MaxExp, &finite);
  inv_scale.f32()[0] = finite ? fp8_pow2(-e) : std::numeric_limits<float>::quiet_NaN();
  visit_float(x.dtype(), [&](auto tag) { quantize_kernel<decltype(tag)>(x, fp8_pow2(e), q, q_t); });
}

}  // namespace tandem::ops::cpu
