// CPU causal multi-head self-attention on a fused qkv projection: forward (saving each row's log-sum-exp) and
// backward (recomputing the probabilities from it), over f32, bf16 and f16 qkv/y/dy/dqkv with fp32 math; lse is
// f32. One (batch, head) pair per task: its q, k, v (and o, dO) are widened into contiguous fp32 scratch, the
// products run through cblas_sgemm in blocks of rows, and the results are rounded into the strided outputs once.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// OpenBLAS runs a product on its own thread pool once m*n*k exceeds 4 * 65536 (its default
// GEMM_MULTITHREAD_THRESHOLD times SMP_THRESHOLD_MIN). Called from inside our team, that nests a second pool in
// every per-head product and serialises the team on OpenBLAS's level-3 lock: measured 45x slower for 64 products
// of 65 x 128 x 32 on 2 threads than for 64 x 128 x 32. Blocks of rows keep each product at or under the limit.
constexpr int64_t kBlasSerialLimit = int64_t{1} << 18;
// Fewer rows per product than this waste BLAS on tiny shapes; such (long T, wide D) heads take one product per
// block on OpenBLAS's threads instead, one pair at a time.
constexpr int64_t kMinBlockRows = 16;

struct Dims {
  int64_t b, t, c, h, d;
};

Dims dims_of(const Tensor& qkv, int heads) {
  const int64_t c = qkv.dim(2) / 3;
  return Dims{qkv.dim(0), qkv.dim(1), c, heads, c / heads};
}

// How a call splits its work: `block` rows per product, and `teams` threads over (batch, head) pairs.
struct Plan {
  int64_t block;
  int teams;
};

Plan plan_of(const Dims& s, int threads) {
  const int64_t pairs = s.b * s.h;
  const int64_t block = std::min(s.t, std::max(kMinBlockRows, kBlasSerialLimit / (s.t * s.d)));
  const bool serial_blas = block * s.t * s.d <= kBlasSerialLimit;
  // The dense products dominate: about T*T*D multiply-adds per pair, each a few element operations' worth.
  const bool parallel = serial_blas && pairs > 1 && worth_parallel(pairs * s.t * s.t, s.d);
  const int teams = parallel ? static_cast<int>(std::min<int64_t>(threads, pairs)) : 1;
  return Plan{block, teams};
}

// fp32 scratch per thread of the team: forward q, k, v, o (T, D) and p (T, T); backward also dO, dQ, dK, dV, dP and
// the row dots (T).
int64_t forward_scratch_per_thread(const Dims& s) { return 4 * s.t * s.d + s.t * s.t; }
int64_t backward_scratch_per_thread(const Dims& s) { return 8 * s.t * s.d + 2 * s.t * s.t + s.t; }

// dst (T, D) = the block at `src` whose rows lie `stride` elements apart, widened to fp32: BLAS and the row loops
// then walk dense memory instead of one D-element strip per 3C-element row.
template <class T>
void gather(const T* src, int64_t stride, int64_t t, int64_t d, float* dst) {
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < d; ++j) dst[i * d + j] = load(src + i * stride, j);
}

// The inverse: dst's rows `stride` elements apart = src (T, D), rounded to T once.
template <class T>
void scatter(const float* src, int64_t t, int64_t d, T* dst, int64_t stride) {
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < d; ++j) store(dst + i * stride, j, src[i * d + j]);
}

// c (m, n) = alpha a b^T with a (m, k) and b (n, k), row-major with leading dims lda, ldb, ldc.
void gemm_nt(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
             float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c, static_cast<int>(ldc));
}
// c (m, n) = alpha a b with a (m, k) and b (k, n).
void gemm_nn(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
             float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c, static_cast<int>(ldc));
}
// c (m, n) = alpha a^T b with a (k, m) and b (k, n).
void gemm_tn(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
             float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c, static_cast<int>(ldc));
}

// Row i of the scores, computed over columns [0, width) with width > i: becomes the causal softmax in place (one
// exp per element, max-subtracted so it cannot overflow, summed in double) with zeros at i < j < width. Returns the
// row's log-sum-exp.
float causal_softmax_row(float* row, int64_t i, int64_t width) {
  const float mx = *std::max_element(row, row + i + 1);
  double sum = 0.0;
  for (int64_t j = 0; j <= i; ++j) {
    row[j] = std::exp(row[j] - mx);
    sum += row[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
  std::fill(row + i + 1, row + width, 0.0f);
  return mx + static_cast<float>(std::log(sum));
}

// Row i of the scores, over [0, width) as above, turned back into probabilities from the saved log-sum-exp.
void causal_probs_row(float* row, int64_t i, int64_t width, float lse) {
  for (int64_t j = 0; j <= i; ++j) row[j] = std::exp(row[j] - lse);
  std::fill(row + i + 1, row + width, 0.0f);
}

template <class T>
void forward_kernel(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse) {
  const Dims s = dims_of(qkv, heads);
  const int64_t pairs = s.b * s.h, t = s.t, d = s.d;
  if (pairs == 0 || t == 0 || d == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Plan plan = plan_of(s, omp_get_max_threads());
  const int64_t per_thread = forward_scratch_per_thread(s);
  Tensor scratch =
      Tensor::empty({plan.teams, per_thread}, DType::F32, qkv.device(), "attention scratch");  // (teams, 4TD + TT)
  float* scratch_base = scratch.f32();
  const T* in = elems<T>(qkv);         // (B, T, 3C)
  T* out = elems<T>(y);                // (B, T, C)
  float* lse_out = elems<float>(lse);  // (B, H, T)
  const int64_t ld_qkv = 3 * s.c, ld_y = s.c;

#pragma omp parallel num_threads(plan.teams) if (plan.teams > 1)
  {
    float* q = scratch_base + omp_get_thread_num() * per_thread;  // (T, D)
    float* k = q + t * d;                                         // (T, D)
    float* v = k + t * d;                                         // (T, D)
    float* o = v + t * d;                                         // (T, D)
    float* p = o + t * d;                                         // (T, T), lower-left blocks used
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t bi = bh / s.h, hi = bh % s.h;
      const T* head = in + bi * t * ld_qkv + hi * d;  // q columns of this head, rows 3C apart
      gather(head, ld_qkv, t, d, q);
      gather(head + s.c, ld_qkv, t, d, k);
      gather(head + 2 * s.c, ld_qkv, t, d, v);
      float* row_lse = lse_out + bh * t;  // (T)
      // Rows [r0, r1) attend to keys [0, r1) only: later keys are masked, so their scores are never formed.
      for (int64_t r0 = 0; r0 < t; r0 += plan.block) {
        const int64_t r1 = std::min(t, r0 + plan.block), rows = r1 - r0;
        gemm_nt(rows, r1, d, scale, q + r0 * d, d, k, d, p + r0 * t, t);  // S = scale q k^T
        for (int64_t i = r0; i < r1; ++i) row_lse[i] = causal_softmax_row(p + i * t, i, r1);
        gemm_nn(rows, d, r1, 1.0f, p + r0 * t, t, v, d, o + r0 * d, d);  // O = P v
      }
      scatter(o, t, d, out + bi * t * ld_y + hi * d, ld_y);
    }
  }
}

template <class T>
void backward_kernel(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, const Tensor& dy,
                     const Tensor& dqkv) {
  const Dims s = dims_of(qkv, heads);
  const int64_t pairs = s.b * s.h, t = s.t, d = s.d;
  if (pairs == 0 || t == 0 || d == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Plan plan = plan_of(s, omp_get_max_threads());
  const int64_t td = t * d, tt = t * t;
  const int64_t per_thread = backward_scratch_per_thread(s);
  Tensor scratch =
      Tensor::empty({plan.teams, per_thread}, DType::F32, qkv.device(), "attention scratch");  // (teams, 8TD + 2TT + T)
  float* scratch_base = scratch.f32();
  const T* in = elems<T>(qkv);              // (B, T, 3C)
  const T* o_all = elems<T>(y);             // (B, T, C)
  const float* lse_in = elems<float>(lse);  // (B, H, T)
  const T* g_all = elems<T>(dy);            // (B, T, C)
  T* grad = elems<T>(dqkv);                 // (B, T, 3C)
  const int64_t ld_qkv = 3 * s.c, ld_y = s.c;

#pragma omp parallel num_threads(plan.teams) if (plan.teams > 1)
  {
    float* q = scratch_base + omp_get_thread_num() * per_thread;  // (T, D)
    float* k = q + td;                                            // (T, D)
    float* v = k + td;                                            // (T, D)
    float* o = v + td;                                            // (T, D)
    float* g_o = o + td;                                          // (T, D) dO
    float* g_q = g_o + td;                                        // (T, D) dQ
    float* g_k = g_q + td;                                        // (T, D) dK
    float* g_v = g_k + td;                                        // (T, D) dV
    float* p = g_v + td;                                          // (T, T) P, lower-left blocks used
    float* g_s = p + tt;                                          // (T, T) dP, then dS in place, likewise
    float* row_dot = g_s + tt;                                    // (T) D_i = rowsum(dO * O)
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t bi = bh / s.h, hi = bh % s.h;
      const T* head = in + bi * t * ld_qkv + hi * d;
      gather(head, ld_qkv, t, d, q);
      gather(head + s.c, ld_qkv, t, d, k);
      gather(head + 2 * s.c, ld_qkv, t, d, v);
      gather(o_all + bi * t * ld_y + hi * d, ld_y, t, d, o);
      gather(g_all + bi * t * ld_y + hi * d, ld_y, t, d, g_o);
      // Softmax backward: dS = P (dP - D_i), where D_i = sum_j P_ij dP_ij = rowsum(dO * O) since O = P V.
      for (int64_t i = 0; i < t; ++i) {
        float acc = 0.0f;
        for (int64_t j = 0; j < d; ++j) acc += g_o[i * d + j] * o[i * d + j];
        row_dot[i] = acc;
      }
      const float* row_lse = lse_in + bh * t;  // (T)
      for (int64_t r0 = 0; r0 < t; r0 += plan.block) {
        const int64_t r1 = std::min(t, r0 + plan.block), rows = r1 - r0;
        // P is recomputed from the saved lse rather than stored by forward: (T, T) per head is the largest buffer.
        gemm_nt(rows, r1, d, scale, q + r0 * d, d, k, d, p + r0 * t, t);
        for (int64_t i = r0; i < r1; ++i) causal_probs_row(p + i * t, i, r1, row_lse[i]);
        gemm_nt(rows, r1, d, 1.0f, g_o + r0 * d, d, v, d, g_s + r0 * t, t);  // dP = dO v^T
        for (int64_t i = r0; i < r1; ++i) {
          float* row = g_s + i * t;       // (r1)
          const float* prow = p + i * t;  // (r1)
          for (int64_t j = 0; j < r1; ++j) row[j] = prow[j] * (row[j] - row_dot[i]);
        }
        // dQ = scale dS k (the scale of S = scale q k^T); dS is zero past column r1.
        gemm_nn(rows, d, r1, scale, g_s + r0 * t, t, k, d, g_q + r0 * d, d);
      }
      // Keys [c0, c1) are attended by queries [c0, T) only; those rows' blocks formed columns [c0, c1).
      for (int64_t c0 = 0; c0 < t; c0 += plan.block) {
        const int64_t cols = std::min(t, c0 + plan.block) - c0, below = t - c0;
        gemm_tn(cols, d, below, 1.0f, p + c0 * t + c0, t, g_o + c0 * d, d, g_v + c0 * d, d);   // dV = P^T dO
        gemm_tn(cols, d, below, scale, g_s + c0 * t + c0, t, q + c0 * d, d, g_k + c0 * d, d);  // dK = scale dS^T q
      }
      T* g_head = grad + bi * t * ld_qkv + hi * d;  // dq columns of this head, rows 3C apart
      scatter(g_q, t, d, g_head, ld_qkv);
      scatter(g_k, t, d, g_head + s.c, ld_qkv);
      scatter(g_v, t, d, g_head + 2 * s.c, ld_qkv);
    }
  }
}

}  // namespace

int64_t attention_forward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, const Tensor&,
                                  const Tensor&) {
  const Dims s = dims_of(qkv, heads);
  if (s.b * s.h == 0 || s.t == 0 || s.d == 0) return 0;
  return plan_of(s, ctx.cpu_threads).teams * forward_scratch_per_thread(s) * 4;
}

int64_t attention_backward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, const Tensor&,
                                   const Tensor&, const Tensor&, const Tensor&) {
  const Dims s = dims_of(qkv, heads);
  if (s.b * s.h == 0 || s.t == 0 || s.d == 0) return 0;
  return plan_of(s, ctx.cpu_threads).teams * backward_scratch_per_thread(s) * 4;
}

void attention_forward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse) {
  visit_float(qkv.dtype(), [&](auto t) { forward_kernel<decltype(t)>(qkv, heads, y, lse); });
}

void attention_backward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, const Tensor& dy,
                        const Tensor& dqkv) {
  visit_float(qkv.dtype(), [&](auto t) { backward_kernel<decltype(t)>(qkv, heads, y, lse, dy, dqkv); });
}

}  // namespace tandem::ops::cpu
