// CPU activations: ReLU, the logistic sigmoid and tanh-approximated GELU, forward and backward, and GELU of a biased
// input, over f32, bf16 and f16 storage with fp32 math. Elementwise, so any split over threads gives the same bits, and
// in-place use is safe.
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// s = 0.5 (1 + tanh(u)) for u = K (v + A v^3), computed as the logistic 1 / (1 + exp(-2u)): the same value, one
// exp instead of a tanh (about 4x cheaper), and no cancellation in 1 + tanh(u) where tanh(u) nears -1. For very
// negative u the exp overflows to inf and s is 0, as it should be.
inline float gelu_gate(float v) {
  const float u = kGeluK * (v + kGeluA * v * v * v);
  return 1.0f / (1.0f + std::exp(-2.0f * u));
}

// d/dv of v s(u): s + v ds/du du/dv, with ds/du = 2 s (1 - s) (that is (1 - tanh^2) / 2) and du/dv = K (1 + 3 A v^2).
inline float gelu_slope(float v) {
  const float s = gelu_gate(v);
  return s + 2.0f * v * s * (1.0f - s) * kGeluK * (1.0f + 3.0f * kGeluA * v * v);
}

template <class T>
void relu_forward_kernel(const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  const T* in = elems<T>(x);  // (n)
  T* out = elems<T>(y);       // (n)
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float v = load(in, i);
    store(out, i, v > 0.0f ? v : 0.0f);
  }
}

template <class T>
void relu_backward_kernel(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t n = x.numel();
  const T* in = elems<T>(x);  // (n)
  const T* g = elems<T>(dy);  // (n)
  T* out = elems<T>(dx);      // (n)
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) store(out, i, load(in, i) > 0.0f ? load(g, i) : 0.0f);
}

template <class T>
void sigmoid_forward_kernel(const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  const T* in = elems<T>(x);  // (n)
  T* out = elems<T>(y);       // (n)
#pragma omp parallel for schedule(static) if (worth_parallel(n, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i) store(out, i, 1.0f / (1.0f + std::exp(-load(in, i))));
}

template <class T>
void sigmoid_backward_kernel(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const int64_t n = y.numel();
  const T* s = elems<T>(y);   // (n)
  const T* g = elems<T>(dy);  // (n)
  T* out = elems<T>(dx);      // (n)
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float v = load(s, i);
    store(out, i, load(g, i) * v * (1.0f - v));
  }
}

template <class T>
void gelu_forward_kernel(const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  const T* in = elems<T>(x);  // (n)
  T* out = elems<T>(y);       // (n)
#pragma omp parallel for schedule(static) if (worth_parallel(n, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i) {
    const float v = load(in, i);
    store(out, i, v * gelu_gate(v));  // 0.5 v (1 + tanh(u)) = v s
  }
}

template <class T>
void gelu_backward_kernel(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t n = x.numel();
  const T* in = elems<T>(x);  // (n)
  const T* g = elems<T>(dy);  // (n)
  T* out = elems<T>(dx);      // (n)
#pragma omp parallel for schedule(static) if (worth_parallel(n, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i) {
    store(out, i, load(g, i) * gelu_slope(load(in, i)));
  }
}

// y (N, C) = gelu(x + bias) with the sum rounded to T first, as add_bias stores it.
template <class T>
void bias_gelu_forward_kernel(const Tensor& x, const Tensor& bias, const Tensor& y) {
  const int64_t n = rows_of(x), c = cols_of(x);
  const T* in = elems<T>(x);    // (N, C)
  const T* b = elems<T>(bias);  // (C)
  T* out = elems<T>(y);         // (N, C)
#pragma omp parallel for schedule(static) if (worth_parallel(n * c, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const float v = rounded<T>(load(in, i * c + j) + load(b, j));
      store(out, i * c + j, v * gelu_gate(v));
    }
}

// dx (N, C) = dy * gelu'(x + bias), the sum rounded as in forward.
template <class T>
void bias_gelu_backward_kernel(const Tensor& x, const Tensor& bias, const Tensor& dy, const Tensor& dx) {
  const int64_t n = rows_of(x), c = cols_of(x);
  const T* in = elems<T>(x);    // (N, C)
  const T* b = elems<T>(bias);  // (C)
  const T* g = elems<T>(dy);    // (N, C)
  T* out = elems<T>(dx);        // (N, C)
#pragma omp parallel for schedule(static) if (worth_parallel(n * c, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const int64_t k = i * c + j;
      store(out, k, load(g, k) * gelu_slope(rounded<T>(load(in, k) + load(b, j))));
    }
}

}  // namespace

void relu_forward(const Tensor& x, const Tensor& y) {
  visit_float(x.dtype(), [&](auto t) { relu_forward_kernel<decltype(t)>(x, y); });
}

void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  visit_float(x.dtype(), [&](auto t) { relu_backward_kernel<decltype(t)>(x, dy, dx); });
}

void sigmoid_forward(const Tensor& x, const Tensor& y) {
  visit_float(x.dtype(), [&](auto t) { sigmoid_forward_kernel<decltype(t)>(x, y); });
}

void sigmoid_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  visit_float(y.dtype(), [&](auto t) { sigmoid_backward_kernel<decltype(t)>(y, dy, dx); });
}

void gelu_forward(const Tensor& x, const Tensor& y) {
  visit_float(x.dtype(), [&](auto t) { gelu_forward_kernel<decltype(t)>(x, y); });
}

void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  visit_float(x.dtype(), [&](auto t) { gelu_backward_kernel<decltype(t)>(x, dy, dx); });
}

void bias_gelu_forward(const Tensor& x, const Tensor& bias, const Tensor& y) {
  visit_float(x.dtype(), [&](auto t) { bias_gelu_forward_kernel<decltype(t)>(x, bias, y); });
}

void bias_gelu_backward(const Tensor& x, const Tensor& bias, const Tensor& dy, const Tensor& dx) {
  visit_float(x.dtype(), [&](auto t) { bias_gelu_backward_kernel<decltype(t)>(x, bias, dy, dx); });
}

}  // namespace tandem::ops::cpu
