// CPU causal grouped-query self-attention on a fused qkv projection (ops.h): forward (saving each row's log-sum-exp)
// and backward (recomputing the probabilities from it), over f32, bf16 and f16 qkv/y/dy/dqkv with fp32 math; lse is
// f32. A task's q, k, v (and o, dO) are widened into contiguous fp32 scratch, the products run through cblas_sgemm
// in blocks of rows, and the results are rounded into the strided outputs once. Multi-head attention (ops.h's
// attention_forward / attention_backward) reaches it as the case Hkv = H.
// Forward takes one (batch, query head) pair per task; backward one (batch, kv head) pair, which walks the query
// heads of its group in order and sums their dk and dv in fp32 scratch: a fixed order, no atomics, so the result does
// not depend on the thread count.
// Layouts: qkv and dqkv (B, T, W) with W = (H + 2 Hkv) D: query head h at column h*D, kv head g at H*D + g*D (k) and
// (H + Hkv) D + g*D (v); y and dy (B, T, H*D); lse (B, H, T).
// With documents (B, T) (the documents forms), row i's scores keep only the keys [start_i, i] of its document: the
// softmax and the recomputed probabilities are zero before start_i, so every product downstream (P V, dS, dK, dV)
// sees only the document's keys. Without, start_i = 0.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/document_starts.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// OpenBLAS runs a product on its own thread pool once m*n*k exceeds 4 * 65536 (its default
// GEMM_MULTITHREAD_THRESHOLD times SMP_THRESHOLD_MIN). Called from inside our team, that nests a second pool in
// every per-head product and serialises the team on OpenBLAS's level-3 lock: measured 45x slower for 64 products
// of 65 x 128 x 32 on 2 threads than for 64 x 128 x 32. Blocks of rows keep each product at or under the limit, and
// have at least 16 rows: fewer waste BLAS on tiny shapes; such (long T, wide D) heads take one product per block on
// OpenBLAS's threads instead, one pair at a time.
constexpr int64_t kBlasSerialLimit = int64_t{1} << 18;
constexpr int64_t kMinBlockRows = 16;

struct Dims {
  int64_t b, t, h, kv, d;
  int64_t rep() const { return h / kv; }              // query heads per kv head
  int64_t width() const { return (h + 2 * kv) * d; }  // W: one row of qkv
  int64_t q_col(int64_t hi) const { return hi * d; }
  int64_t k_col(int64_t g) const { return (h + g) * d; }
  int64_t v_col(int64_t g) const { return (h + kv + g) * d; }
};

Dims dims_of(const Tensor& qkv, int heads, int kv_heads) {
  const int64_t d = qkv.dim(2) / (heads + 2 * static_cast<int64_t>(kv_heads));
  return Dims{qkv.dim(0), qkv.dim(1), heads, kv_heads, d};
}

// How a call splits its work: `block` rows per product, and `teams` threads over `pairs` tasks of about
// `heads_per_pair` T*T*D products each.
struct Plan {
  int64_t block;
  int teams;
};

Plan plan_of(const Dims& s, int64_t pairs, int64_t heads_per_pair, int threads) {
  const int64_t block = std::min(s.t, std::max(kMinBlockRows, kBlasSerialLimit / (s.t * s.d)));
  const bool serial_blas = block * s.t * s.d <= kBlasSerialLimit;
  const bool parallel = serial_blas && pairs > 1 && worth_parallel(pairs * heads_per_pair * s.t * s.t, s.d);
  const int teams = parallel ? static_cast<int>(std::min<int64_t>(threads, pairs)) : 1;
  return Plan{block, teams};
}

Plan forward_plan(const Dims& s, int threads) { return plan_of(s, s.b * s.h, 1, threads); }
Plan backward_plan(const Dims& s, int threads) { return plan_of(s, s.b * s.kv, s.rep(), threads); }

// fp32 scratch per thread of the team: forward q, k, v, o (T, D) and p (T, T); backward k, v, dK, dV (T, D) of the kv
// head, q, o, dO, dQ (T, D) of one query head, P and dS (T, T), and the row dots (T).
int64_t forward_scratch_per_thread(const Dims& s) { return 4 * s.t * s.d + s.t * s.t; }
int64_t backward_scratch_per_thread(const Dims& s) { return 8 * s.t * s.d + 2 * s.t * s.t + s.t; }

bool empty(const Dims& s) { return s.b * s.h == 0 || s.t == 0 || s.d == 0; }

// dst (T, D) = the block at `src` whose rows lie `stride` elements apart, widened to fp32.
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

// c (m, n) = alpha op(a) op(b) + beta c, row-major with leading dims lda, ldb, ldc.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// Row i of the scores over columns [0, width) with width > i: becomes the softmax over keys [start, i] in place
// (max-subtracted, summed in double) with zeros elsewhere. Returns the row's log-sum-exp.
float causal_softmax_row(float* row, int64_t i, int64_t width, int64_t start) {
  const float mx = *std::max_element(row + start, row + i + 1);
  double sum = 0.0;
  for (int64_t j = start; j <= i; ++j) {
    row[j] = std::exp(row[j] - mx);
    sum += row[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = start; j <= i; ++j) row[j] *= inv;
  std::fill(row, row + start, 0.0f);
  std::fill(row + i + 1, row + width, 0.0f);
  return mx + static_cast<float>(std::log(sum));
}

// Row i of the scores, over [0, width) as above, turned back into probabilities from the saved log-sum-exp.
void causal_probs_row(float* row, int64_t i, int64_t width, int64_t start, float lse) {
  for (int64_t j = start; j <= i; ++j) row[j] = std::exp(row[j] - lse);
  std::fill(row, row + start, 0.0f);
  std::fill(row + i + 1, row + width, 0.0f);
}

template <class T>
void forward_kernel(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents, const Tensor& y,
                    const Tensor& lse) {
  const Dims s = dims_of(qkv, heads, kv_heads);
  if (empty(s)) return;
  const std::vector<int64_t> starts = document_starts(documents, s.b, s.t);
  const int64_t pairs = s.b * s.h, t = s.t, d = s.d, ld_qkv = s.width(), ld_y = s.h * s.d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Plan plan = forward_plan(s, omp_get_max_threads());
  const int64_t per_thread = forward_scratch_per_thread(s);
  Tensor scratch = Tensor::empty({plan.teams, per_thread}, DType::F32, qkv.device(),
                                 "attention_gqa scratch");  // (teams, 4TD + TT)
  float* scratch_base = scratch.f32();
  const T* in = elems<T>(qkv);         // (B, T, W)
  T* out = elems<T>(y);                // (B, T, H*D)
  float* lse_out = elems<float>(lse);  // (B, H, T)

#pragma omp parallel num_threads(plan.teams) if (plan.teams > 1)
  {
    float* q = scratch_base + omp_get_thread_num() * per_thread;  // (T, D)
    float* k = q + t * d;                                         // (T, D)
    float* v = k + t * d;                                         // (T, D)
    float* o = v + t * d;                                         // (T, D)
    float* p = o + t * d;                                         // (T, T), lower-left blocks used
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t bi = bh / s.h, hi = bh % s.h, g = hi / s.rep();
      const T* rows = in + bi * t * ld_qkv;  // row 0 of this batch element, rows W apart
      gather(rows + s.q_col(hi), ld_qkv, t, d, q);
      gather(rows + s.k_col(g), ld_qkv, t, d, k);
      gather(rows + s.v_col(g), ld_qkv, t, d, v);
      float* row_lse = lse_out + bh * t;  // (T)
      // Rows [r0, r1) attend to keys [0, r1) only: later keys are masked, so their scores are never formed.
      for (int64_t r0 = 0; r0 < t; r0 += plan.block) {
        const int64_t r1 = std::min(t, r0 + plan.block), n_rows = r1 - r0;
        gemm(false, true, n_rows, r1, d, scale, q + r0 * d, d, k, d, 0.0f, p + r0 * t, t);  // S = scale q k^T
        for (int64_t i = r0; i < r1; ++i)
          row_lse[i] = causal_softmax_row(p + i * t, i, r1, starts[static_cast<size_t>(bi * t + i)]);
        gemm(false, false, n_rows, d, r1, 1.0f, p + r0 * t, t, v, d, 0.0f, o + r0 * d, d);  // O = P v
      }
      scatter(o, t, d, out + bi * t * ld_y + hi * d, ld_y);
    }
  }
}

template <class T>
void backward_kernel(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents, const Tensor& y,
                     const Tensor& lse, const Tensor& dy, const Tensor& dqkv) {
  const Dims s = dims_of(qkv, heads, kv_heads);
  if (empty(s)) return;
  const std::vector<int64_t> starts = document_starts(documents, s.b, s.t);
  const int64_t pairs = s.b * s.kv, t = s.t, d = s.d, td = t * d, tt = t * t;
  const int64_t ld_qkv = s.width(), ld_y = s.h * s.d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Plan plan = backward_plan(s, omp_get_max_threads());
  const int64_t per_thread = backward_scratch_per_thread(s);
  Tensor scratch = Tensor::empty({plan.teams, per_thread}, DType::F32, qkv.device(),
                                 "attention_gqa scratch");  // (teams, 8TD + 2TT + T)
  float* scratch_base = scratch.f32();
  const T* in = elems<T>(qkv);              // (B, T, W)
  const T* o_all = elems<T>(y);             // (B, T, H*D)
  const float* lse_in = elems<float>(lse);  // (B, H, T)
  const T* g_all = elems<T>(dy);            // (B, T, H*D)
  T* grad = elems<T>(dqkv);                 // (B, T, W)

#pragma omp parallel num_threads(plan.teams) if (plan.teams > 1)
  {
    float* k = scratch_base + omp_get_thread_num() * per_thread;  // (T, D) of the kv head
    float* v = k + td;                                            // (T, D)
    float* g_k = v + td;                                          // (T, D) dK, summed over the group
    float* g_v = g_k + td;                                        // (T, D) dV, likewise
    float* q = g_v + td;                                          // (T, D) of one query head
    float* o = q + td;                                            // (T, D)
    float* g_o = o + td;                                          // (T, D) dO
    float* g_q = g_o + td;                                        // (T, D) dQ
    float* p = g_q + td;                                          // (T, T) P, lower-left blocks used
    float* g_s = p + tt;                                          // (T, T) dP, then dS in place, likewise
    float* row_dot = g_s + tt;                                    // (T) D_i = rowsum(dO * O)
#pragma omp for schedule(static)
    for (int64_t bg = 0; bg < pairs; ++bg) {
      const int64_t bi = bg / s.kv, g = bg % s.kv;
      const T* rows = in + bi * t * ld_qkv;  // row 0 of this batch element, rows W apart
      T* g_rows = grad + bi * t * ld_qkv;
      gather(rows + s.k_col(g), ld_qkv, t, d, k);
      gather(rows + s.v_col(g), ld_qkv, t, d, v);
      for (int64_t r = 0; r < s.rep(); ++r) {
        const int64_t hi = g * s.rep() + r;
        // The group's first head overwrites dK and dV, the others add to them.
        const float beta = r == 0 ? 0.0f : 1.0f;
        gather(rows + s.q_col(hi), ld_qkv, t, d, q);
        gather(o_all + bi * t * ld_y + hi * d, ld_y, t, d, o);
        gather(g_all + bi * t * ld_y + hi * d, ld_y, t, d, g_o);
        // Softmax backward: dS = P (dP - D_i), where D_i = sum_j P_ij dP_ij = rowsum(dO * O) since O = P V.
        row_dots(g_o, o, t, d, row_dot);
        const float* row_lse = lse_in + (bi * s.h + hi) * t;  // (T)
        for (int64_t r0 = 0; r0 < t; r0 += plan.block) {
          const int64_t r1 = std::min(t, r0 + plan.block), n_rows = r1 - r0;
          gemm(false, true, n_rows, r1, d, scale, q + r0 * d, d, k, d, 0.0f, p + r0 * t, t);  // S, then P
          for (int64_t i = r0; i < r1; ++i)
            causal_probs_row(p + i * t, i, r1, starts[static_cast<size_t>(bi * t + i)], row_lse[i]);
          gemm(false, true, n_rows, r1, d, 1.0f, g_o + r0 * d, d, v, d, 0.0f, g_s + r0 * t, t);  // dP = dO v^T
          for (int64_t i = r0; i < r1; ++i) {
            float* row = g_s + i * t;       // (r1)
            const float* prow = p + i * t;  // (r1)
            for (int64_t j = 0; j < r1; ++j) row[j] = prow[j] * (row[j] - row_dot[i]);
          }
          // dQ = scale dS k; dS is zero past column r1.
          gemm(false, false, n_rows, d, r1, scale, g_s + r0 * t, t, k, d, 0.0f, g_q + r0 * d, d);
        }
        // Keys [c0, c1) are attended by queries [c0, T) only; those rows' blocks formed columns [c0, c1).
        for (int64_t c0 = 0; c0 < t; c0 += plan.block) {
          const int64_t cols = std::min(t, c0 + plan.block) - c0, below = t - c0;
          gemm(true, false, cols, d, below, 1.0f, p + c0 * t + c0, t, g_o + c0 * d, d, beta, g_v + c0 * d,
               d);  // dV (+)= P^T dO
          gemm(true, false, cols, d, below, scale, g_s + c0 * t + c0, t, q + c0 * d, d, beta, g_k + c0 * d,
               d);  // dK (+)= scale dS^T q
        }
        scatter(g_q, t, d, g_rows + s.q_col(hi), ld_qkv);
      }
      scatter(g_k, t, d, g_rows + s.k_col(g), ld_qkv);
      scatter(g_v, t, d, g_rows + s.v_col(g), ld_qkv);
    }
  }
}

}  // namespace

int64_t attention_gqa_forward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads,
                                      const Tensor&, const Tensor&, int64_t) {
  const Dims s = dims_of(qkv, heads, kv_heads);
  if (empty(s)) return 0;
  return forward_plan(s, ctx.cpu_threads).teams * forward_scratch_per_thread(s) * 4;
}

int64_t attention_gqa_backward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads,
                                       const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t) {
  const Dims s = dims_of(qkv, heads, kv_heads);
  if (empty(s)) return 0;
  return backward_plan(s, ctx.cpu_threads).teams * backward_scratch_per_thread(s) * 4;
}

int64_t attention_gqa_documents_forward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads,
                                                const Tensor&, const Tensor& y, const Tensor& lse) {
  return attention_gqa_forward_scratch(ctx, qkv, heads, kv_heads, y, lse, 0);
}

int64_t attention_gqa_documents_backward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads,
                                                 const Tensor&, const Tensor& y, const Tensor& lse, const Tensor& dy,
                                                 const Tensor& dqkv) {
  return attention_gqa_backward_scratch(ctx, qkv, heads, kv_heads, y, lse, dy, dqkv, 0);
}

// block_bytes: the CUDA backward's blocks (ops.h); the CPU kernels have none.
void attention_gqa_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse, int64_t) {
  visit_float(qkv.dtype(), [&](auto t) { forward_kernel<decltype(t)>(qkv, heads, kv_heads, Tensor(), y, lse); });
}

void attention_gqa_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                            const Tensor& dy, const Tensor& dqkv, int64_t) {
  visit_float(qkv.dtype(),
              [&](auto t) { backward_kernel<decltype(t)>(qkv, heads, kv_heads, Tensor(), y, lse, dy, dqkv); });
}

void attention_gqa_documents_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                                     const Tensor& y, const Tensor& lse) {
  visit_float(qkv.dtype(), [&](auto t) { forward_kernel<decltype(t)>(qkv, heads, kv_heads, documents, y, lse); });
}

void attention_gqa_documents_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                                      const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dqkv) {
  visit_float(qkv.dtype(),
              [&](auto t) { backward_kernel<decltype(t)>(qkv, heads, kv_heads, documents, y, lse, dy, dqkv); });
}

}  // namespace tandem::ops::cpu
