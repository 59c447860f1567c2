// CPU kernels of ring attention's block pairs (ops/attention_pair.h), over f32, bf16 and f16 inputs with fp32 math.
// Each query row sees a range [lo, hi) of the key block, from its place and its document's (keys_seen), found once a
// call before the parallel regions. Forward takes one (batch, query head) pair per task: q, k, v widened into fp32
// scratch, the scores and their masked softmax formed whole (Tq, Tk), and P v written into the f32 output. Backward
// takes one (batch, kv head) pair, which walks the query heads of its group in order and adds each one's dk and dv
// straight into the f32 accumulator: a fixed order, no atomics, so the result does not depend on the thread count.
// Layouts: q, y, dy, dq (B, Tq, H D), query head h at column h D; kv, dkv (B, Tk, 2 Hkv D), k head g at g D and v head
// g at (Hkv + g) D; lse (B, H, Tq).
#include "tandem/ops/cpu/attention_pair.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tandem/ops/cpu/document_starts.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// As cpu/attention_gqa.cc: products past OpenBLAS's threading threshold run one task at a time on its own threads,
// smaller ones one task a thread of our team.
constexpr int64_t kBlasSerialLimit = int64_t{1} << 18;

struct Dims {
  int64_t b, tq, tk, h, kv, d;
  int64_t rep() const { return h / kv; }
};

Dims dims_of(const Tensor& q, const Tensor& kv, int heads, int kv_heads) {
  return Dims{q.dim(0), q.dim(1), kv.dim(1), heads, kv_heads, q.dim(2) / heads};
}

bool empty(const Dims& s) { return s.b * s.h == 0 || s.tq == 0 || s.tk == 0 || s.d == 0; }

int teams_of(const Dims& s, int64_t tasks, int64_t heads_per_task, int threads) {
  const bool parallel =
      s.tq * s.tk * s.d <= kBlasSerialLimit && tasks > 1 && worth_parallel(tasks * heads_per_task * s.tq * s.tk, s.d);
  return parallel ? static_cast<int>(std::min<int64_t>(threads, tasks)) : 1;
}

// fp32 scratch per thread: forward q (Tq, D), k and v (Tk, D), p (Tq, Tk); backward k, v (Tk, D), q, o, dO (Tq, D),
// P and dS (Tq, Tk), the row dots (Tq).
int64_t forward_per_thread(const Dims& s) { return s.tq * s.d + 2 * s.tk * s.d + s.tq * s.tk; }
int64_t backward_per_thread(const Dims& s) { return 2 * s.tk * s.d + 3 * s.tq * s.d + 2 * s.tq * s.tk + s.tq; }

// dst (t, d) = the block at `src` whose rows lie `stride` elements apart, widened to fp32.
template <class T>
void gather(const T* src, int64_t stride, int64_t t, int64_t d, float* dst) {
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < d; ++j) dst[i * d + j] = load(src + i * stride, j);
}

// c (m, n) = alpha op(a) op(b) + beta c, row-major with leading dims lda, ldb, ldc.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// The keys [lo, hi) of the block that each query row sees (pairs of (B, Tq)): up to its own position, from its
// document's first (`starts`: document_starts of the whole sequences).
std::vector<std::pair<int64_t, int64_t>> keys_seen(const PairPlace& place, const Dims& s) {
  const int64_t b = s.b, tq = s.tq, tk = s.tk, t = place.documents.defined() ? place.documents.dim(1) : 0;
  const std::vector<int64_t> starts = document_starts(place.documents, b, t);
  std::vector<std::pair<int64_t, int64_t>> seen(static_cast<size_t>(b * tq));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < tq; ++i) {
      const int64_t hi = std::clamp<int64_t>(place.q0 + i - place.k0 + 1, 0, tk);
      const int64_t first = t > 0 ? starts[static_cast<size_t>(bi * t + place.q0 + i)] : 0;
      seen[static_cast<size_t>(bi * tq + i)] = {std::clamp<int64_t>(first - place.k0, 0, hi), hi};
    }
  return seen;
}

template <class T>
void forward_kernel(const Tensor& q_in, const Tensor& kv_in, int heads, int kv_heads, const PairPlace& place,
                    const Tensor& y, const Tensor& lse) {
  const Dims s = dims_of(q_in, kv_in, heads, kv_heads);
  if (empty(s)) return;
  const int64_t tasks = s.b * s.h, tq = s.tq, tk = s.tk, d = s.d, ld_q = s.h * d, ld_kv = 2 * s.kv * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto seen = keys_seen(place, s);
  const int teams = teams_of(s, tasks, 1, omp_get_max_threads());
  const int64_t per_thread = forward_per_thread(s);
  Tensor scratch = Tensor::empty({teams, per_thread}, DType::F32, q_in.device(), "attention pair scratch");
  float* base = scratch.f32();
  const T* qs = elems<T>(q_in);    // (B, Tq, H D)
  const T* kvs = elems<T>(kv_in);  // (B, Tk, 2 Hkv D)
  float* out = y.f32();            // (B, Tq, H D)
  float* lse_out = lse.f32();      // (B, H, Tq)

#pragma omp parallel num_threads(teams) if (teams > 1)
  {
    float* q = base + omp_get_thread_num() * per_thread;  // (Tq, D)
    float* k = q + tq * d;                                // (Tk, D)
    float* v = k + tk * d;                                // (Tk, D)
    float* p = v + tk * d;                                // (Tq, Tk)
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < tasks; ++bh) {
      const int64_t bi = bh / s.h, hi = bh % s.h, g = hi / s.rep();
      gather(qs + bi * tq * ld_q + hi * d, ld_q, tq, d, q);
      gather(kvs + bi * tk * ld_kv + g * d, ld_kv, tk, d, k);
      gather(kvs + bi * tk * ld_kv + (s.kv + g) * d, ld_kv, tk, d, v);
      gemm(false, true, tq, tk, d, scale, q, d, k, d, 0.0f, p, tk);  // S = scale q k^T
      float* row_lse = lse_out + bh * tq;                            // (Tq)
      for (int64_t i = 0; i < tq; ++i) {
        float* row = p + i * tk;
        const auto [lo, hi] = seen[static_cast<size_t>(bi * tq + i)];
        if (lo >= hi) {  // no key of this block: nothing to merge
          std::fill(row, row + tk, 0.0f);
          row_lse[i] = -std::numeric_limits<float>::infinity();
          continue;
        }
        const float mx = *std::max_element(row + lo, row + hi);
        double sum = 0.0;
        for (int64_t j = lo; j < hi; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = lo; j < hi; ++j) row[j] *= inv;
        std::fill(row, row + lo, 0.0f);
        std::fill(row + hi, row + tk, 0.0f);
        row_lse[i] = mx + static_cast<float>(std::log(sum));
      }
      gemm(false, false, tq, d, tk, 1.0f, p, tk, v, d, 0.0f, out + bi * tq * ld_q + hi * d, ld_q);  // y = P v
    }
  }
}

template <class T>
void backward_kernel(const Tensor& q_in, const Tensor& kv_in, int heads, int kv_heads, const PairPlace& place,
                     const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dq, const Tensor& dkv) {
  const Dims s = dims_of(q_in, kv_in, heads, kv_heads);
  if (empty(s)) return;
  const int64_t tasks = s.b * s.kv, tq = s.tq, tk = s.tk, d = s.d, ld_q = s.h * d, ld_kv = 2 * s.kv * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto seen = keys_seen(place, s);
  const int teams = teams_of(s, tasks, s.rep(), omp_get_max_threads());
  const int64_t per_thread = backward_per_thread(s);
  Tensor scratch = Tensor::empty({teams, per_thread}, DType::F32, q_in.device(), "attention pair scratch");
  float* base = scratch.f32();
  const T* qs = elems<T>(q_in);     // (B, Tq, H D)
  const T* kvs = elems<T>(kv_in);   // (B, Tk, 2 Hkv D)
  const T* ys = elems<T>(y);        // (B, Tq, H D)
  const T* dys = elems<T>(dy);      // (B, Tq, H D)
  const float* lse_in = lse.f32();  // (B, H, Tq)
  float* dq_out = dq.f32();         // (B, Tq, H D)
  float* dkv_out = dkv.f32();       // (B, Tk, 2 Hkv D)

#pragma omp parallel num_threads(teams) if (teams > 1)
  {
    float* k = base + omp_get_thread_num() * per_thread;  // (Tk, D)
    float* v = k + tk * d;                                // (Tk, D)
    float* q = v + tk * d;                                // (Tq, D)
    float* o = q + tq * d;                                // (Tq, D)
    float* g_o = o + tq * d;                              // (Tq, D)
    float* p = g_o + tq * d;                              // (Tq, Tk)
    float* g_s = p + tq * tk;                             // (Tq, Tk) dP, then dS in place
    float* row_dot = g_s + tq * tk;                       // (Tq) rowsum(dO * O)
#pragma omp for schedule(static)
    for (int64_t bg = 0; bg < tasks; ++bg) {
      const int64_t bi = bg / s.kv, g = bg % s.kv;
      gather(kvs + bi * tk * ld_kv + g * d, ld_kv, tk, d, k);
      gather(kvs + bi * tk * ld_kv + (s.kv + g) * d, ld_kv, tk, d, v);
      float* g_k = dkv_out + bi * tk * ld_kv + g * d;           // (Tk, D), rows ld_kv apart
      float* g_v = dkv_out + bi * tk * ld_kv + (s.kv + g) * d;  // (Tk, D), likewise
      for (int64_t r = 0; r < s.rep(); ++r) {
        const int64_t hi = g * s.rep() + r;
        gather(qs + bi * tq * ld_q + hi * d, ld_q, tq, d, q);
        gather(ys + bi * tq * ld_q + hi * d, ld_q, tq, d, o);
        gather(dys + bi * tq * ld_q + hi * d, ld_q, tq, d, g_o);
        row_dots(g_o, o, tq, d, row_dot);
        const float* row_lse = lse_in + (bi * s.h + hi) * tq;             // (Tq)
        gemm(false, true, tq, tk, d, scale, q, d, k, d, 0.0f, p, tk);     // S, then P
        gemm(false, true, tq, tk, d, 1.0f, g_o, d, v, d, 0.0f, g_s, tk);  // dP = dO v^T
        for (int64_t i = 0; i < tq; ++i) {
          float* prow = p + i * tk;
          float* srow = g_s + i * tk;
          const auto [lo, hi] = seen[static_cast<size_t>(bi * tq + i)];
          for (int64_t j = lo; j < hi; ++j) {
            prow[j] = std::exp(prow[j] - row_lse[i]);
            srow[j] = prow[j] * (srow[j] - row_dot[i]);  // dS = P (dP - D_i)
          }
          std::fill(prow, prow + std::min(lo, hi), 0.0f);
          std::fill(srow, srow + std::min(lo, hi), 0.0f);
          std::fill(prow + hi, prow + tk, 0.0f);
          std::fill(srow + hi, srow + tk, 0.0f);
        }
        gemm(false, false, tq, d, tk, scale, g_s, tk, k, d, 1.0f, dq_out + bi * tq * ld_q + hi * d, ld_q);  // dQ +=
        gemm(true, false, tk, d, tq, 1.0f, p, tk, g_o, d, 1.0f, g_v, ld_kv);   // dV += P^T dO
        gemm(true, false, tk, d, tq, scale, g_s, tk, q, d, 1.0f, g_k, ld_kv);  // dK +=
      }
    }
  }
}

}  // namespace

void attention_pair_forward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                            const Tensor& y, const Tensor& lse) {
  visit_float(q.dtype(), [&](auto t) { forward_kernel<decltype(t)>(q, kv, heads, kv_heads, place, y, lse); });
}

void attention_pair_backward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                             const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dq,
                             const Tensor& dkv) {
  visit_float(q.dtype(),
              [&](auto t) { backward_kernel<decltype(t)>(q, kv, heads, kv_heads, place, y, lse, dy, dq, dkv); });
}

void attention_merge(const Tensor& y_part, const Tensor& lse_part, const Tensor& y, const Tensor& lse) {
  const int64_t B = y.dim(0), T = y.dim(1), H = lse.dim(1), D = y.dim(2) / H;
  const float* yp = y_part.f32();    // (B, T, H D)
  const float* lp = lse_part.f32();  // (B, H, T)
  float* ys = y.f32();
  float* ls = lse.f32();
  const int64_t rows = B * H * T;
#pragma omp parallel for schedule(static) if (worth_parallel(rows * D, kTranscendentalCost))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t bi = r / (H * T), hi = (r / T) % H, t = r % T;
    const float a = ls[r], c = lp[r];
    float* row = ys + (bi * T + t) * H * D + hi * D;
    const float* part = yp + (bi * T + t) * H * D + hi * D;
    if (a == -std::numeric_limits<float>::infinity()) {
      std::copy(part, part + D, row);
      ls[r] = c;
      continue;
    }
    if (c == -std::numeric_limits<float>::infinity()) continue;  // the part saw no key
    const float mx = std::max(a, c);
    const float merged = mx + std::log(std::exp(a - mx) + std::exp(c - mx));
    const float wa = std::exp(a - merged), wc = std::exp(c - merged);
    for (int64_t j = 0; j < D; ++j) row[j] = row[j] * wa + part[j] * wc;
    ls[r] = merged;
  }
}

int64_t attention_pair_forward_scratch(int threads, const Tensor& q, const Tensor& kv, int heads, int kv_heads) {
  const Dims s = dims_of(q, kv, heads, kv_heads);
  if (empty(s)) return 0;
  return teams_of(s, s.b * s.h, 1, threads) * forward_per_thread(s) * 4;
}

int64_t attention_pair_backward_scratch(int threads, const Tensor& q, const Tensor& kv, int heads, int kv_heads) {
  const Dims s = dims_of(q, kv, heads, kv_heads);
  if (empty(s)) return 0;
  return teams_of(s, s.b * s.kv, s.rep(), threads) * backward_per_thread(s) * 4;
}

}  // namespace tandem::ops::cpu
