// CPU RMSNorm over the last dim (ops.h): forward (saving rstd per row) and backward, over f32, bf16 and f16 x, gamma,
// y, dy and dx with fp32 math; rstd and dgamma are f32 always. The row's sum of squares is taken in double; dgamma is
// a column reduction with a fixed summation order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Columns per task of the dgamma reduction (as layernorm's): each column belongs to one task, which sums the rows in
// order.
constexpr int64_t kColumnChunk = 64;

template <class T>
void forward_kernel(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd, float eps) {
  const int64_t n = rows_of(x), c = cols_of(x);
  const T* in = elems<T>(x);             // (N, C)
  const T* g = elems<T>(gamma);          // (C)
  T* out = elems<T>(y);                  // (N, C)
  float* rstd_out = elems<float>(rstd);  // (N)
  if (c == 0) return;
#pragma omp parallel for schedule(static) if (worth_parallel(n * c, kRowPassCost))
  for (int64_t i = 0; i < n; ++i) {
    const T* row = in + i * c;  // (C)
    double sq = 0.0;
    for (int64_t j = 0; j < c; ++j) sq += static_cast<double>(load(row, j)) * load(row, j);
    const float r = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(c) + static_cast<double>(eps)));
    T* dst = out + i * c;  // (C); element j of x is read before element j of y is written, so y may be x
    for (int64_t j = 0; j < c; ++j) store(dst, j, rounded<T>(load(row, j) * r) * load(g, j));
    rstd_out[i] = r;
  }
}

template <class T>
void backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd, const Tensor& dx,
                     const Tensor& dgamma) {
  const int64_t n = rows_of(x), c = cols_of(x);
  const T* gy = elems<T>(dy);            // (N, C)
  const T* in = elems<T>(x);             // (N, C)
  const T* g = elems<T>(gamma);          // (C)
  const float* rs = elems<float>(rstd);  // (N)
  T* gx = elems<T>(dx);                  // (N, C)
  float* dg = elems<float>(dgamma);      // (C)
  if (c == 0) return;

  // dgamma first: dx is written afterwards, so dx may be dy.
  const int64_t chunks = (c + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (worth_parallel(n * c, kRowPassCost))
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t c0 = chunk * kColumnChunk, width = std::min(kColumnChunk, c - c0);
    float acc[kColumnChunk] = {};  // (width)
    for (int64_t i = 0; i < n; ++i) {
      const T* row_x = in + i * c + c0;   // (width)
      const T* row_dy = gy + i * c + c0;  // (width)
      for (int64_t j = 0; j < width; ++j) acc[j] += load(row_dy, j) * rounded<T>(load(row_x, j) * rs[i]);
    }
    for (int64_t j = 0; j < width; ++j) dg[c0 + j] += acc[j];
  }

  // dx = rstd (g - xhat mean(g xhat)) with g = dy * gamma: y_j = gamma_j x_j rstd and d rstd / d x_k = -rstd^3 x_k / C.
#pragma omp parallel for schedule(static) if (worth_parallel(n * c, kRowPassCost))
  for (int64_t i = 0; i < n; ++i) {
    const T* row_x = in + i * c;   // (C)
    const T* row_dy = gy + i * c;  // (C)
    double sum_gx = 0.0;
    for (int64_t j = 0; j < c; ++j) sum_gx += load(row_dy, j) * load(g, j) * (load(row_x, j) * rs[i]);
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(c));
    T* row_dx = gx + i * c;  // (C); element j of dy is read before element j of dx is written
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = load(row_x, j) * rs[i];
      store(row_dx, j, rs[i] * (load(row_dy, j) * load(g, j) - xhat * mean_gx));
    }
  }
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd, float eps) {
  visit_float(x.dtype(), [&](auto t) { forward_kernel<decltype(t)>(x, gamma, y, rstd, eps); });
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dgamma) {
  visit_float(x.dtype(), [&](auto t) { backward_kernel<decltype(t)>(dy, x, gamma, rstd, dx, dgamma); });
}

void rmsnorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                          const Tensor& dres, const Tensor& dx, const Tensor& dgamma) {
  rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma);
  add(dx, dres, dx);
}

}  // namespace tandem::ops::cpu
