// CPU LayerNorm over the last dim: forward (saving mean and rstd per row) and backward (plain, or with a residual
// gradient added: backward then add), over f32, bf16 and f16 x, gamma, beta, y, dy and dx with fp32 math; mean,
// rstd, dgamma and dbeta are f32 always.
// Row statistics are summed in double; dgamma/dbeta are column reductions with a fixed summation order.
#include <algorithm>
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Columns per task of the dgamma/dbeta reduction (see bias_backward): each column belongs to one task, which
// sums the rows in order, so the result does not depend on the thread count.
constexpr int64_t kColumnChunk = 64;

template <class T>
void forward_kernel(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, const Tensor& mean,
                    const Tensor& rstd, float eps) {
  const int64_t n = rows_of(x), c = cols_of(x);
  const T* in = elems<T>(x);             // (N, C)
  const T* g = elems<T>(gamma);          // (C)
  const T* b = elems<T>(beta);           // (C)
  T* out = elems<T>(y);                  // (N, C)
  float* mu_out = elems<float>(mean);    // (N)
  float* rstd_out = elems<float>(rstd);  // (N)
  if (c == 0) return;
#pragma omp parallel for schedule(static) if (worth_parallel(n * c, kRowPassCost))
  for (int64_t i = 0; i < n; ++i) {
    const T* row = in + i * c;  // (C)
    // Two passes, so the variance is not a difference of two large sums.
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) sum += load(row, j);
    const double mu = sum / static_cast<double>(c);
    double sq = 0.0;
    for (int64_t j = 0; j < c; ++j) sq += (load(row, j) - mu) * (load(row, j) - mu);
    const double var = sq / static_cast<double>(c);
    const float r = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    const float m = static_cast<float>(mu);
    T* dst = out + i * c;  // (C)
    for (int64_t j = 0; j < c; ++j) store(dst, j, (load(row, j) - m) * r * load(g, j) + load(b, j));
    mu_out[i] = m;
    rstd_out[i] = r;
  }
}

template <class T>
void backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  const int64_t n = rows_of(x), c = cols_of(x);
  const T* gy = elems<T>(dy);            // (N, C)
  const T* in = elems<T>(x);             // (N, C)
  const T* g = elems<T>(gamma);          // (C)
  const float* mu = elems<float>(mean);  // (N)
  const float* rs = elems<float>(rstd);  // (N)
  T* gx = elems<T>(dx);                  // (N, C)
  float* dg = elems<float>(dgamma);      // (C)
  float* db = elems<float>(dbeta);       // (C)
  if (c == 0) return;

  // Parameter gradients first: dx is written afterwards, so dx may even share memory with dy.
  const int64_t chunks = (c + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (worth_parallel(n * c, kRowPassCost))
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t c0 = chunk * kColumnChunk, width = std::min(kColumnChunk, c - c0);
    float acc_g[kColumnChunk] = {};  // (width)
    float acc_b[kColumnChunk] = {};  // (width)
    for (int64_t i = 0; i < n; ++i) {
      const T* row_x = in + i * c + c0;   // (width)
      const T* row_dy = gy + i * c + c0;  // (width)
      for (int64_t j = 0; j < width; ++j) {
        const float gj = load(row_dy, j);
        acc_g[j] += gj * (load(row_x, j) - mu[i]) * rs[i];
        acc_b[j] += gj;
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      dg[c0 + j] += acc_g[j];
      db[c0 + j] += acc_b[j];
    }
  }

  // dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy * gamma: the gradient through the normalisation,
  // whose mean and variance both depend on every element of the row.
#pragma omp parallel for schedule(static) if (worth_parallel(n * c, kRowPassCost))
  for (int64_t i = 0; i < n; ++i) {
    const T* row_x = in + i * c;   // (C)
    const T* row_dy = gy + i * c;  // (C)
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      const float gj = load(row_dy, j) * load(g, j);
      sum_g += gj;
      sum_gx += gj * ((load(row_x, j) - mu[i]) * rs[i]);
    }
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(c));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(c));
    T* row_dx = gx + i * c;  // (C)
    // Element j of dy is read before element j of dx is written, so dx may share memory with dy.
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (load(row_x, j) - mu[i]) * rs[i];
      store(row_dx, j, rs[i] * (load(row_dy, j) * load(g, j) - mean_g - xhat * mean_gx));
    }
  }
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, const Tensor& mean,
                       const Tensor& rstd, float eps) {
  visit_float(x.dtype(), [&](auto t) { forward_kernel<decltype(t)>(x, gamma, beta, y, mean, rstd, eps); });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  visit_float(x.dtype(), [&](auto t) { backward_kernel<decltype(t)>(dy, x, gamma, mean, rstd, dx, dgamma, dbeta); });
}

void layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                            const Tensor& rstd, const Tensor& dres, const Tensor& dx, const Tensor& dgamma,
                            const Tensor& dbeta) {
  layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
  add(dx, dres, dx);
}

}  // namespace tandem::ops::cpu
