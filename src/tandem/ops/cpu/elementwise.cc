// CPU elementwise ops: bias add and its column reduction, add, axpy, scale, fill and dtype casts, over f32, bf16
// and f16 storage with fp32 math. Every loop writes each output from its own inputs only, so in-place use (out
// aliasing an input) is safe.
#include <algorithm>
#include <cstring>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Columns per task of a column reduction: 64 floats is one 256-byte strip of a row, wide enough for SIMD and
// short enough that C = 768 still yields 12 tasks.
constexpr int64_t kColumnChunk = 64;

template <class T>
void add_bias_kernel(const Tensor& y, const Tensor& bias) {
  const int64_t n = rows_of(y), c = cols_of(y);
  T* out = elems<T>(y);         // (N, C)
  const T* b = elems<T>(bias);  // (C)
#pragma omp parallel for schedule(static) if (worth_parallel(n * c))
  for (int64_t i = 0; i < n; ++i) {
    T* row = out + i * c;  // (C)
    for (int64_t j = 0; j < c; ++j) store(row, j, load(row, j) + load(b, j));
  }
}

template <class T>
void bias_backward_kernel(const Tensor& dy, const Tensor& dbias) {
  const int64_t n = rows_of(dy), c = cols_of(dy);
  const T* g = elems<T>(dy);        // (N, C)
  float* db = elems<float>(dbias);  // (C)
  const int64_t chunks = (c + kColumnChunk - 1) / kColumnChunk;
  // Each column is summed by one task in row order: the result is the same for any thread count.
#pragma omp parallel for schedule(static) if (worth_parallel(n * c))
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t c0 = chunk * kColumnChunk, width = std::min(kColumnChunk, c - c0);
    float acc[kColumnChunk] = {};  // (width)
    for (int64_t i = 0; i < n; ++i) {
      const T* row = g + i * c + c0;  // (width)
      for (int64_t j = 0; j < width; ++j) acc[j] += load(row, j);
    }
    for (int64_t j = 0; j < width; ++j) db[c0 + j] += acc[j];
  }
}

template <class T>
void add_kernel(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = out.numel();
  const T* x = elems<T>(a);  // (n)
  const T* y = elems<T>(b);  // (n)
  T* z = elems<T>(out);      // (n)
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) store(z, i, load(x, i) + load(y, i));
}

template <class T>
void axpy_kernel(float alpha, const Tensor& x, const Tensor& y) {
  const int64_t n = y.numel();
  const T* in = elems<T>(x);  // (n)
  T* out = elems<T>(y);       // (n)
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) store(out, i, load(out, i) + alpha * load(in, i));
}

template <class T>
void scale_kernel(const Tensor& x, float alpha) {
  const int64_t n = x.numel();
  T* p = elems<T>(x);  // (n)
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) store(p, i, load(p, i) * alpha);
}

template <class T>
void fill_kernel(const Tensor& x, float value) {
  const int64_t n = x.numel();
  T* p = elems<T>(x);  // (n)
  T rounded[1];
  store(rounded, 0, value);  // round once; every element gets the same bits
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) p[i] = rounded[0];
}

template <class From, class To>
void cast_kernel(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  const From* in = elems<From>(src);  // (n)
  To* out = elems<To>(dst);           // (n)
  // Widening to fp32 is exact for every source type, so each element is rounded once, to the target.
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) store(out, i, load(in, i));
}

}  // namespace

void add_bias(const Tensor& y, const Tensor& bias) {
  visit_float(y.dtype(), [&](auto t) { add_bias_kernel<decltype(t)>(y, bias); });
}

void bias_backward(const Tensor& dy, const Tensor& dbias) {
  visit_float(dy.dtype(), [&](auto t) { bias_backward_kernel<decltype(t)>(dy, dbias); });
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  visit_float(out.dtype(), [&](auto t) { add_kernel<decltype(t)>(a, b, out); });
}

void axpy(float alpha, const Tensor& x, const Tensor& y) {
  visit_float(y.dtype(), [&](auto t) { axpy_kernel<decltype(t)>(alpha, x, y); });
}

void scale(const Tensor& x, float alpha) {
  visit_float(x.dtype(), [&](auto t) { scale_kernel<decltype(t)>(x, alpha); });
}

void fill(const Tensor& x, float value) {
  visit_float(x.dtype(), [&](auto t) { fill_kernel<decltype(t)>(x, value); });
}

void cast(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src.view(dst.shape()));  // same bits: a plain copy
    return;
  }
  visit_float(src.dtype(), [&](auto from) {
    visit_float(dst.dtype(), [&](auto to) { cast_kernel<decltype(from), decltype(to)>(src, dst); });
  });
}

}  // namespace tandem::ops::cpu
