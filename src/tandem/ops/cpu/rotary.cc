// CPU rotary position embedding (ops.h): the rotate_half rotation of the first `heads` heads of each (b, t) row by
// the row's position, forward and backward (the transpose: -sin), over f32, bf16 and f16 storage with fp32 math; the
// cos and sin tables are f32. Each row is independent and each pair (i, i + D/2) is read before it is written, so
// any split over threads gives the same bits and y may be x.
#include <algorithm>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// sign +1: y = R(t) x (forward); sign -1: y = R(t)^T x (backward).
template <class T>
void rotary_kernel(const Tensor& x, const Tensor& cos, const Tensor& sin, int heads, const Tensor& y, float sign) {
  const int64_t b = x.dim(0), t = x.dim(1), rows = b * t;
  if (rows == 0) return;
  const int64_t width = x.numel() / rows;  // W
  const int64_t half = cos.dim(1), d = 2 * half;
  const T* in = elems<T>(x);            // (B*T, W)
  T* out = elems<T>(y);                 // (B*T, W)
  const float* cs = elems<float>(cos);  // (T_max, D/2)
  const float* sn = elems<float>(sin);  // (T_max, D/2)
  const bool in_place = x.raw() == y.raw();
  const int64_t rotated = heads * d;
#pragma omp parallel for schedule(static) if (worth_parallel(rows * width, 2))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = r % t;
    const float* c = cs + pos * half;  // (D/2)
    const float* s = sn + pos * half;  // (D/2)
    const T* src = in + r * width;     // (W)
    T* dst = out + r * width;          // (W)
    for (int64_t h = 0; h < heads; ++h) {
      const T* xh = src + h * d;  // (D)
      T* yh = dst + h * d;        // (D)
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = load(xh, i), x2 = load(xh, i + half);
        const float si = sign * s[i];
        store(yh, i, x1 * c[i] - x2 * si);
        store(yh, i + half, x2 * c[i] + x1 * si);
      }
    }
    if (!in_place) std::copy(src + rotated, src + width, dst + rotated);
  }
}

}  // namespace

void rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, int heads, const Tensor& y) {
  visit_float(x.dtype(), [&](auto t) { rotary_kernel<decltype(t)>(x, cos, sin, heads, y, 1.0f); });
}

void rotary_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, int heads, const Tensor& dx) {
  visit_float(dy.dtype(), [&](auto t) { rotary_kernel<decltype(t)>(dy, cos, sin, heads, dx, -1.0f); });
}

}  // namespace tandem::ops::cpu
