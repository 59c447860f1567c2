// CPU elementwise ops: bias add and its column reduction, add, axpy, scale, ReLU, GELU and dtype casts.
// Every loop writes each output from its own inputs only, so in-place use (out aliasing an input) is safe.
#include <algorithm>
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Columns per task of a column reduction: 64 floats is one 256-byte strip of a row, wide enough for SIMD and
// short enough that C = 768 still yields 12 tasks.
constexpr int64_t kColumnChunk = 64;

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

}  // namespace

void add_bias(const Tensor& y, const Tensor& bias) {
  const int64_t n = rows_of(y), c = cols_of(y);
  float* out = y.f32();         // (N, C)
  const float* b = bias.f32();  // (C)
#pragma omp parallel for schedule(static) if (n * c >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    float* row = out + i * c;  // (C)
    for (int64_t j = 0; j < c; ++j) row[j] += b[j];
  }
}

void bias_backward(const Tensor& dy, const Tensor& dbias) {
  const int64_t n = rows_of(dy), c = cols_of(dy);
  const float* g = dy.f32();  // (N, C)
  float* db = dbias.f32();    // (C)
  const int64_t chunks = (c + kColumnChunk - 1) / kColumnChunk;
  // Each column is summed by one task in row order: the result is the same for any thread count.
#pragma omp parallel for schedule(static) if (n * c >= kParallelMinElements)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t c0 = chunk * kColumnChunk, width = std::min(kColumnChunk, c - c0);
    float acc[kColumnChunk] = {};  // (width)
    for (int64_t i = 0; i < n; ++i) {
      const float* row = g + i * c + c0;  // (width)
      for (int64_t j = 0; j < width; ++j) acc[j] += row[j];
    }
    for (int64_t j = 0; j < width; ++j) db[c0 + j] += acc[j];
  }
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = out.numel();
  const float* x = a.f32();  // (n)
  const float* y = b.f32();  // (n)
  float* z = out.f32();      // (n)
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}

void axpy(float alpha, const Tensor& x, const Tensor& y) {
  const int64_t n = y.numel();
  const float* in = x.f32();  // (n)
  float* out = y.f32();       // (n)
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) out[i] += alpha * in[i];
}

void scale(const Tensor& x, float alpha) {
  const int64_t n = x.numel();
  float* p = x.f32();  // (n)
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) p[i] *= alpha;
}

void relu_forward(const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  const float* in = x.f32();  // (n)
  float* out = y.f32();       // (n)
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t n = x.numel();
  const float* in = x.f32();  // (n)
  const float* g = dy.f32();  // (n)
  float* out = dx.f32();      // (n)
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? g[i] : 0.0f;
}

void gelu_forward(const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  const float* in = x.f32();  // (n)
  float* out = y.f32();       // (n)
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    out[i] = 0.5f * v * (1.0f + std::tanh(kGeluK * (v + kGeluA * v * v * v)));
  }
}

void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t n = x.numel();
  const float* in = x.f32();  // (n)
  const float* g = dy.f32();  // (n)
  float* out = dx.f32();      // (n)
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float t = std::tanh(kGeluK * (v + kGeluA * v * v * v));
    // d/dv of 0.5 v (1 + t): the product rule, with dt/dv = (1 - t^2) K (1 + 3 A v^2).
    const float local = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluA * v * v);
    out[i] = g[i] * local;
  }
}

void cast(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src.view(dst.shape()));
    return;
  }
  if (src.dtype() == DType::F32) {
    const float* in = src.f32();  // (n)
    uint16_t* out = dst.u16();    // (n)
    if (dst.dtype() == DType::BF16) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
    } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(in[i]);
    }
    return;
  }
  const uint16_t* in = src.u16();  // (n)
  float* out = dst.f32();          // (n)
  if (src.dtype() == DType::BF16) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
  }
}

}  // namespace tandem::ops::cpu
