// CPU LayerNorm over the last dim: forward (saving mean and rstd per row) and backward.
// Row statistics are summed in double; dgamma/dbeta are column reductions with a fixed summation order.
#include <algorithm>
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Columns per task of the dgamma/dbeta reduction (see bias_backward): each column belongs to one task, which
// sums the rows in order, so the result does not depend on the thread count.
constexpr int64_t kColumnChunk = 64;

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, const Tensor& mean,
                       const Tensor& rstd, float eps) {
  const int64_t n = rows_of(x), c = cols_of(x);
  const float* in = x.f32();     // (N, C)
  const float* g = gamma.f32();  // (C)
  const float* b = beta.f32();   // (C)
  float* out = y.f32();          // (N, C)
  float* mu_out = mean.f32();    // (N)
  float* rstd_out = rstd.f32();  // (N)
  if (c == 0) return;
#pragma omp parallel for schedule(static) if (n * c >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = in + i * c;  // (C)
    // Two passes, so the variance is not a difference of two large sums.
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) sum += row[j];
    const double mu = sum / static_cast<double>(c);
    double sq = 0.0;
    for (int64_t j = 0; j < c; ++j) sq += (row[j] - mu) * (row[j] - mu);
    const double var = sq / static_cast<double>(c);
    const float r = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    const float m = static_cast<float>(mu);
    float* dst = out + i * c;  // (C)
    for (int64_t j = 0; j < c; ++j) dst[j] = (row[j] - m) * r * g[j] + b[j];
    mu_out[i] = m;
    rstd_out[i] = r;
  }
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  const int64_t n = rows_of(x), c = cols_of(x);
  const float* gy = dy.f32();    // (N, C)
  const float* in = x.f32();     // (N, C)
  const float* g = gamma.f32();  // (C)
  const float* mu = mean.f32();  // (N)
  const float* rs = rstd.f32();  // (N)
  float* gx = dx.f32();          // (N, C)
  float* dg = dgamma.f32();      // (C)
  float* db = dbeta.f32();       // (C)
  if (c == 0) return;

  // Parameter gradients first: dx is written afterwards, so dx may even share memory with dy.
  const int64_t chunks = (c + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (n * c >= kParallelMinElements)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t c0 = chunk * kColumnChunk, width = std::min(kColumnChunk, c - c0);
    float acc_g[kColumnChunk] = {};  // (width)
    float acc_b[kColumnChunk] = {};  // (width)
    for (int64_t i = 0; i < n; ++i) {
      const float* row_x = in + i * c + c0;   // (width)
      const float* row_dy = gy + i * c + c0;  // (width)
      for (int64_t j = 0; j < width; ++j) {
        acc_g[j] += row_dy[j] * (row_x[j] - mu[i]) * rs[i];
        acc_b[j] += row_dy[j];
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      dg[c0 + j] += acc_g[j];
      db[c0 + j] += acc_b[j];
    }
  }

  // dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy * gamma: the gradient through the normalisation,
  // whose mean and variance both depend on every element of the row.
#pragma omp parallel for schedule(static) if (n * c >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float* row_x = in + i * c;   // (C)
    const float* row_dy = gy + i * c;  // (C)
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      const float gj = row_dy[j] * g[j];
      sum_g += gj;
      sum_gx += gj * ((row_x[j] - mu[i]) * rs[i]);
    }
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(c));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(c));
    float* row_dx = gx + i * c;  // (C)
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (row_x[j] - mu[i]) * rs[i];
      row_dx[j] = rs[i] * (row_dy[j] * g[j] - mean_g - xhat * mean_gx);
    }
  }
}

}  // namespace tandem::ops::cpu
