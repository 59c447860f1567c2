// CPU causal multi-head self-attention on a fused qkv projection: forward (saving each row's log-sum-exp) and
// backward (recomputing the probabilities from it). One (batch, head) pair per task, cblas_sgemm inside.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tandem/ops/cpu/cpu_ops.h"

namespace tandem::ops::cpu {
namespace {

struct Dims {
  int64_t b, t, c, h, d;
};

Dims dims_of(const Tensor& qkv, int heads) {
  const int64_t c = qkv.dim(2) / 3;
  return Dims{qkv.dim(0), qkv.dim(1), c, heads, c / heads};
}

// Copies the (T, D) block starting at `src` whose rows lie `stride` floats apart into contiguous `dst`: BLAS and
// the row loops then walk dense memory instead of one D-float strip per 3C-float row.
void gather(const float* src, int64_t stride, int64_t t, int64_t d, float* dst) {
  for (int64_t i = 0; i < t; ++i) std::memcpy(dst + i * d, src + i * stride, static_cast<size_t>(d) * sizeof(float));
}

// Threads that work on (batch, head) pairs, each with its own scratch slice: no more than there are pairs.
int team_size(int64_t pairs) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), pairs)));
}

// s (T, T) = scale q k^T, the raw scores of every pair (the causal mask is applied by the row passes below).
void scores(const float* q, const float* k, int64_t t, int64_t d, float scale, float* s) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(t), static_cast<int>(t), static_cast<int>(d),
              scale, q, static_cast<int>(d), k, static_cast<int>(d), 0.0f, s, static_cast<int>(t));
}

// lse (T): the log-sum-exp of each score row over its causal part j <= i, max-subtracted so exp cannot overflow.
void causal_lse(const float* s, int64_t t, float* lse) {
  for (int64_t i = 0; i < t; ++i) {
    const float* row = s + i * t;  // (T)
    const float mx = *std::max_element(row, row + i + 1);
    double sum = 0.0;
    for (int64_t j = 0; j <= i; ++j) sum += std::exp(row[j] - mx);
    lse[i] = mx + static_cast<float>(std::log(sum));
  }
}

// Turns scores s (T, T) into probabilities in place: exp(s - lse) on and below the diagonal, 0 above it. The zeros
// let P v and the backward products run as plain dense GEMMs.
void causal_probs(float* s, int64_t t, const float* lse) {
  for (int64_t i = 0; i < t; ++i) {
    float* row = s + i * t;  // (T)
    for (int64_t j = 0; j <= i; ++j) row[j] = std::exp(row[j] - lse[i]);
    std::fill(row + i + 1, row + t, 0.0f);
  }
}

}  // namespace

void attention_forward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse) {
  const Dims s = dims_of(qkv, heads);
  const int64_t pairs = s.b * s.h;
  if (pairs == 0 || s.t == 0 || s.d == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  const int teams = team_size(pairs);
  const int64_t per_thread = 3 * s.t * s.d + s.t * s.t;
  Tensor scratch =
      Tensor::empty({teams, per_thread}, DType::F32, qkv.device(), "attention scratch");  // (teams, 3TD + TT)
  float* scratch_base = scratch.f32();
  const float* in = qkv.f32();  // (B, T, 3C)
  float* out = y.f32();         // (B, T, C)
  float* lse_out = lse.f32();   // (B, H, T)
  const int ld_qkv = static_cast<int>(3 * s.c), ld_y = static_cast<int>(s.c);

#pragma omp parallel num_threads(teams)
  {
    float* q = scratch_base + omp_get_thread_num() * per_thread;  // (T, D)
    float* k = q + s.t * s.d;                                     // (T, D)
    float* v = k + s.t * s.d;                                     // (T, D)
    float* p = v + s.t * s.d;                                     // (T, T)
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t bi = bh / s.h, hi = bh % s.h;
      const float* head = in + bi * s.t * ld_qkv + hi * s.d;  // q columns of this head, rows 3C apart
      gather(head, ld_qkv, s.t, s.d, q);
      gather(head + s.c, ld_qkv, s.t, s.d, k);
      gather(head + 2 * s.c, ld_qkv, s.t, s.d, v);
      scores(q, k, s.t, s.d, scale, p);
      causal_lse(p, s.t, lse_out + bh * s.t);
      causal_probs(p, s.t, lse_out + bh * s.t);
      // y's head columns = P v, written in place with y's row stride.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.t), static_cast<int>(s.d),
                  static_cast<int>(s.t), 1.0f, p, static_cast<int>(s.t), v, static_cast<int>(s.d), 0.0f,
                  out + bi * s.t * ld_y + hi * s.d, ld_y);
    }
  }
}

void attention_backward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, const Tensor& dy,
                        const Tensor& dqkv) {
  const Dims s = dims_of(qkv, heads);
  const int64_t pairs = s.b * s.h;
  if (pairs == 0 || s.t == 0 || s.d == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  const int teams = team_size(pairs);
  const int64_t td = s.t * s.d, tt = s.t * s.t;
  const int64_t per_thread = 5 * td + 2 * tt + s.t;
  Tensor scratch =
      Tensor::empty({teams, per_thread}, DType::F32, qkv.device(), "attention scratch");  // (teams, 5TD + 2TT + T)
  float* scratch_base = scratch.f32();
  const float* in = qkv.f32();      // (B, T, 3C)
  const float* o_all = y.f32();     // (B, T, C)
  const float* lse_in = lse.f32();  // (B, H, T)
  const float* g_all = dy.f32();    // (B, T, C)
  float* grad = dqkv.f32();         // (B, T, 3C)
  const int ld_qkv = static_cast<int>(3 * s.c), ld_y = static_cast<int>(s.c);
  const int t = static_cast<int>(s.t), d = static_cast<int>(s.d);

#pragma omp parallel num_threads(teams)
  {
    float* q = scratch_base + omp_get_thread_num() * per_thread;  // (T, D)
    float* k = q + td;                                            // (T, D)
    float* v = k + td;                                            // (T, D)
    float* o = v + td;                                            // (T, D)
    float* g_o = o + td;                                          // (T, D) dO
    float* p = g_o + td;                                          // (T, T)
    float* g_s = p + tt;                                          // (T, T) dP, then dS in place
    float* row_dot = g_s + tt;                                    // (T) D_i = rowsum(dO * O)
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t bi = bh / s.h, hi = bh % s.h;
      const float* head = in + bi * s.t * ld_qkv + hi * s.d;
      gather(head, ld_qkv, s.t, s.d, q);
      gather(head + s.c, ld_qkv, s.t, s.d, k);
      gather(head + 2 * s.c, ld_qkv, s.t, s.d, v);
      gather(o_all + bi * s.t * ld_y + hi * s.d, ld_y, s.t, s.d, o);
      gather(g_all + bi * s.t * ld_y + hi * s.d, ld_y, s.t, s.d, g_o);
      // P is recomputed from the saved lse rather than stored by forward: (T, T) per head is the largest buffer.
      scores(q, k, s.t, s.d, scale, p);
      causal_probs(p, s.t, lse_in + bh * s.t);

      float* g_head = grad + bi * s.t * ld_qkv + hi * s.d;  // dq columns of this head, rows 3C apart
      // dV = P^T dO.
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, 1.0f, p, t, g_o, d, 0.0f, g_head + 2 * s.c, ld_qkv);
      // dP = dO V^T.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, 1.0f, g_o, d, v, d, 0.0f, g_s, t);
      // Softmax backward: dS = P (dP - D_i), where D_i = sum_j P_ij dP_ij = rowsum(dO * O) since O = P V.
      for (int64_t i = 0; i < s.t; ++i) {
        float acc = 0.0f;
        for (int64_t j = 0; j < s.d; ++j) acc += g_o[i * s.d + j] * o[i * s.d + j];
        row_dot[i] = acc;
      }
      for (int64_t i = 0; i < s.t; ++i) {
        float* row = g_s + i * s.t;       // (T)
        const float* prow = p + i * s.t;  // (T)
        for (int64_t j = 0; j < s.t; ++j) row[j] = prow[j] * (row[j] - row_dot[i]);
      }
      // dQ = scale dS K; dK = scale dS^T Q (the scale of S = scale q k^T).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, scale, g_s, t, k, d, 0.0f, g_head, ld_qkv);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, scale, g_s, t, q, d, 0.0f, g_head + s.c, ld_qkv);
    }
  }
}

}  // namespace tandem::ops::cpu
