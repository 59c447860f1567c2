// CPU mixture-of-experts ops (ops.h): the router's softmax and top-k, its backward and balance sums, the stable
// grouping of routed rows by expert, and the gather and weighted combine between tokens and routed rows. All math in
// fp32; each output element is written by one loop iteration whose sums run in a fixed order, so any split over
// threads gives the same bits. Legend: N tokens, E experts, k choices, M = N k routed rows, C channels.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {

void moe_route(const Tensor& logits, int k, bool normalize, const Tensor& probs, const Tensor& idx,
               const Tensor& weights) {
  const int64_t n = logits.dim(0), e = logits.dim(1);
  const float* in = logits.f32();  // (N, E)
  float* p = probs.f32();          // (N, E)
  int32_t* chosen = idx.i32();     // (N, k)
  float* w = weights.f32();        // (N, k)
#pragma omp parallel for schedule(static) if (worth_parallel(n * e, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i) {
    const float* row = in + i * e;
    float* pr = p + i * e;
    const float top = *std::max_element(row, row + e);
    float sum = 0.0f;
    for (int64_t j = 0; j < e; ++j) sum += (pr[j] = std::exp(row[j] - top));
    for (int64_t j = 0; j < e; ++j) pr[j] /= sum;
    // k passes of the largest not yet taken, the lower expert first among equals.
    int32_t* ci = chosen + i * k;
    float* wi = w + i * k;
    float picked = 0.0f;
    for (int s = 0; s < k; ++s) {
      int64_t best = -1;
      for (int64_t j = 0; j < e; ++j) {
        if (std::find(ci, ci + s, static_cast<int32_t>(j)) != ci + s) continue;
        if (best < 0 || pr[j] > pr[best]) best = j;
      }
      ci[s] = static_cast<int32_t>(best);
      wi[s] = pr[best];
      picked += pr[best];
    }
    if (normalize)
      for (int s = 0; s < k; ++s) wi[s] /= picked;
  }
}

void moe_route_backward(const Tensor& probs, const Tensor& idx, const Tensor& dweights, bool normalize,
                        const Tensor& aux, const Tensor& dlogits) {
  const int64_t n = probs.dim(0), e = probs.dim(1), k = idx.dim(1);
  const float* p = probs.f32();                          // (N, E)
  const int32_t* chosen = idx.i32();                     // (N, k)
  const float* dw = dweights.f32();                      // (N, k)
  const float* a = aux.defined() ? aux.f32() : nullptr;  // (E) or none
  float* out = dlogits.f32();                            // (N, E)
#pragma omp parallel for schedule(static) if (worth_parallel(n * e))
  for (int64_t i = 0; i < n; ++i) {
    const float* pr = p + i * e;
    const int32_t* ci = chosen + i * k;
    const float* dwi = dw + i * k;
    float* dp = out + i * e;  // dprobs first, then overwritten by dlogits
    for (int64_t j = 0; j < e; ++j) dp[j] = a ? a[j] : 0.0f;
    // With normalize, w_s = p_s / S over the chosen: dp_s = (dw_s - sum_r dw_r w_r) / S.
    float picked = 0.0f, dot = 0.0f;
    for (int64_t s = 0; s < k; ++s) picked += pr[ci[s]];
    if (normalize)
      for (int64_t s = 0; s < k; ++s) dot += dwi[s] * (pr[ci[s]] / picked);
    for (int64_t s = 0; s < k; ++s) dp[ci[s]] += normalize ? (dwi[s] - dot) / picked : dwi[s];
    // Softmax: dlogit_j = p_j (dp_j - sum_f p_f dp_f).
    float mean = 0.0f;
    for (int64_t j = 0; j < e; ++j) mean += pr[j] * dp[j];
    for (int64_t j = 0; j < e; ++j) dp[j] = pr[j] * (dp[j] - mean);
  }
}

void moe_route_stats(const Tensor& probs, const Tensor& idx, const Tensor& counts, const Tensor& probsum) {
  const int64_t n = probs.dim(0), e = probs.dim(1), k = idx.dim(1);
  const float* p = probs.f32();       // (N, E)
  const int32_t* chosen = idx.i32();  // (N, k)
  float* c = counts.f32();            // (E)
  float* ps = probsum.f32();          // (E)
  // One expert per iteration, its rows in order.
#pragma omp parallel for schedule(static) if (worth_parallel(n * e))
  for (int64_t j = 0; j < e; ++j) {
    float hits = 0.0f, sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      sum += p[i * e + j];
      for (int64_t s = 0; s < k; ++s) hits += chosen[i * k + s] == j ? 1.0f : 0.0f;
    }
    c[j] += hits;
    ps[j] += sum;
  }
}

void moe_aux_loss(const Tensor& counts, const Tensor& probsum, float scale, const Tensor& sum) {
  const float* c = counts.f32();
  const float* ps = probsum.f32();
  float dot = 0.0f;
  for (int64_t j = 0; j < counts.numel(); ++j) dot += c[j] * ps[j];
  sum.f32()[0] += scale * dot;
}

void moe_order(const Tensor& idx, int experts, const Tensor& pos, const Tensor& offsets) {
  const int64_t m = idx.numel();
  const int32_t* chosen = idx.i32();  // (N k)
  int32_t* row = pos.i32();           // (N k)
  int32_t* off = offsets.i32();       // (E + 1)
  std::vector<int64_t> next(static_cast<size_t>(experts) + 1, 0);
  for (int64_t r = 0; r < m; ++r) {
    const int32_t ex = chosen[r];
    TANDEM_CHECK(ex >= 0 && ex < experts, "moe_order: choice ", r, " names expert ", ex, " of ", experts);
    ++next[static_cast<size_t>(ex) + 1];
  }
  for (int j = 0; j < experts; ++j) next[j + 1] += next[j];
  for (int j = 0; j <= experts; ++j) off[j] = static_cast<int32_t>(next[j]);
  for (int64_t r = 0; r < m; ++r) row[r] = static_cast<int32_t>(next[chosen[r]]++);
}

std::vector<int64_t> moe_expert_rows(const Tensor& offsets, int64_t rows) {
  const int32_t* off = offsets.i32();
  const int64_t e = offsets.numel() - 1;
  TANDEM_CHECK(off[0] == 0 && off[e] == rows, "moe_expert_rows: offsets run from ", off[0], " to ", off[e],
               ", not 0 to ", rows);
  std::vector<int64_t> out(static_cast<size_t>(e));
  for (int64_t j = 0; j < e; ++j) out[j] = off[j + 1] - off[j];
  return out;
}

int64_t grouped_matmul_scratch(const ScratchContext& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
                               const std::vector<int64_t>& rows, bool trans_b, float beta) {
  int64_t most = 0;
  for_each_group(b, rows, [&](const Tensor& w, int64_t first, int64_t n) {
    most = std::max(most, matmul_scratch(ctx, a.rows(first, n), w, c.rows(first, n), false, trans_b, beta));
  });
  return most;
}

int64_t grouped_weight_grad_scratch(const ScratchContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& dw,
                                    const std::vector<int64_t>& rows) {
  int64_t most = 0;
  for_each_group(dw, rows, [&](const Tensor& w, int64_t first, int64_t n) {
    most = std::max(most, linear_weight_grad_scratch(ctx, dy.rows(first, n), x.rows(first, n), w, Tensor()));
  });
  return most;
}

void grouped_matmul(const Tensor& a, const Tensor& b, const Tensor& c, const std::vector<int64_t>& rows, bool trans_b,
                    float beta) {
  for_each_group(b, rows, [&](const Tensor& w, int64_t first, int64_t n) {
    matmul(a.rows(first, n), w, c.rows(first, n), false, trans_b, beta);
  });
}

void grouped_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw, const std::vector<int64_t>& rows) {
  for_each_group(dw, rows, [&](const Tensor& w, int64_t first, int64_t n) {
    linear_weight_grad(dy.rows(first, n), x.rows(first, n), w, Tensor());
  });
}

namespace {

template <class T>
void gather_kernel(const Tensor& x, const Tensor& pos, const Tensor& xg) {
  const int64_t n = x.dim(0), c = x.dim(1), k = pos.dim(1);
  const T* in = elems<T>(x);      // (N, C)
  const int32_t* at = pos.i32();  // (N, k)
  T* out = elems<T>(xg);          // (M, C)
#pragma omp parallel for schedule(static) if (worth_parallel(n * k * c))
  for (int64_t i = 0; i < n; ++i)
    for (int64_t s = 0; s < k; ++s) std::copy(in + i * c, in + (i + 1) * c, out + at[i * k + s] * c);
}

template <class T>
void combine_kernel(const Tensor& yg, const Tensor& pos, const Tensor& weights, const Tensor& y) {
  const int64_t n = y.dim(0), c = y.dim(1), k = pos.dim(1);
  const T* in = elems<T>(yg);                                    // (M, C)
  const int32_t* at = pos.i32();                                 // (N, k)
  const float* w = weights.defined() ? weights.f32() : nullptr;  // (N, k) or none
  T* out = elems<T>(y);                                          // (N, C)
#pragma omp parallel for schedule(static) if (worth_parallel(n * k * c))
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      float acc = load(out, i * c + j);
      for (int64_t s = 0; s < k; ++s) acc += (w ? w[i * k + s] : 1.0f) * load(in, at[i * k + s] * c + j);
      store(out, i * c + j, acc);
    }
  }
}

template <class T>
void combine_backward_kernel(const Tensor& dy, const Tensor& yg, const Tensor& pos, const Tensor& weights,
                             const Tensor& dyg, const Tensor& dweights) {
  const int64_t n = dy.dim(0), c = dy.dim(1), k = pos.dim(1);
  const T* g = elems<T>(dy);       // (N, C)
  const T* routed = elems<T>(yg);  // (M, C)
  const int32_t* at = pos.i32();   // (N, k)
  const float* w = weights.f32();  // (N, k)
  T* dg = elems<T>(dyg);           // (M, C)
  float* dw = dweights.f32();      // (N, k)
#pragma omp parallel for schedule(static) if (worth_parallel(n * k * c))
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t r = at[i * k + s];
      float dot = 0.0f;
      for (int64_t j = 0; j < c; ++j) {
        const float gj = load(g, i * c + j);
        dot += gj * load(routed, r * c + j);
        store(dg, r * c + j, w[i * k + s] * gj);
      }
      dw[i * k + s] = dot;
    }
  }
}

}  // namespace

void moe_gather(const Tensor& x, const Tensor& pos, const Tensor& xg) {
  visit_float(x.dtype(), [&](auto t) { gather_kernel<decltype(t)>(x, pos, xg); });
}

void moe_combine(const Tensor& yg, const Tensor& pos, const Tensor& weights, const Tensor& y) {
  visit_float(y.dtype(), [&](auto t) { combine_kernel<decltype(t)>(yg, pos, weights, y); });
}

void moe_combine_backward(const Tensor& dy, const Tensor& yg, const Tensor& pos, const Tensor& weights,
                          const Tensor& dyg, const Tensor& dweights) {
  visit_float(dy.dtype(), [&](auto t) { combine_backward_kernel<decltype(t)>(dy, yg, pos, weights, dyg, dweights); });
}

}  // namespace tandem::ops::cpu
