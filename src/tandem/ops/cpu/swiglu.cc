// CPU SwiGLU on a fused gate|up projection (ops.h): forward and backward over f32, bf16 and f16 storage with fp32
// math. Elementwise per (row, column) pair of gate and up, each pair read before it is written, so any split over
// threads gives the same bits and the backward may run in place.
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// sigmoid(g) = 1 / (1 + exp(-g)): for very negative g the exp overflows to inf and the result is 0, as it should be.
inline float sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

template <class T>
void forward_kernel(const Tensor& gate_up, const Tensor& y) {
  const int64_t n = rows_of(y), f = cols_of(y);
  const T* in = elems<T>(gate_up);  // (N, 2F)
  T* out = elems<T>(y);             // (N, F)
#pragma omp parallel for schedule(static) if (worth_parallel(n * f, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i) {
    const T* gate = in + i * 2 * f;  // (F)
    const T* up = gate + f;          // (F)
    T* dst = out + i * f;            // (F)
    for (int64_t j = 0; j < f; ++j) {
      const float g = load(gate, j);
      store(dst, j, g * sigmoid(g) * load(up, j));
    }
  }
}

template <class T>
void backward_kernel(const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up) {
  const int64_t n = rows_of(dy), f = cols_of(dy);
  const T* in = elems<T>(gate_up);  // (N, 2F)
  const T* grad = elems<T>(dy);     // (N, F)
  T* out = elems<T>(dgate_up);      // (N, 2F)
#pragma omp parallel for schedule(static) if (worth_parallel(n * f, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i) {
    const T* gate = in + i * 2 * f;  // (F)
    const T* up = gate + f;          // (F)
    const T* g_y = grad + i * f;     // (F)
    T* d_gate = out + i * 2 * f;     // (F)
    T* d_up = d_gate + f;            // (F)
    for (int64_t j = 0; j < f; ++j) {
      const float g = load(gate, j), u = load(up, j), dyj = load(g_y, j);
      const float s = sigmoid(g);
      // d silu / dg = s + g s (1 - s)
      store(d_gate, j, dyj * u * (s * (1.0f + g * (1.0f - s))));
      store(d_up, j, dyj * g * s);
    }
  }
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, const Tensor& y) {
  visit_float(y.dtype(), [&](auto t) { forward_kernel<decltype(t)>(gate_up, y); });
}

void swiglu_backward(const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up) {
  visit_float(dy.dtype(), [&](auto t) { backward_kernel<decltype(t)>(gate_up, dy, dgate_up); });
}

}  // namespace tandem::ops::cpu
