// CPU AdamW: one Adam step over flat fp32 buffers (param, grad, m, v), with decoupled weight decay or with
// L2 regularisation (the decay added to the gradient), and where asked the updated weights rounded to bf16 or f16 in
// the same pass (the values an offloaded unit sends up, without a second pass over the master). It is also the
// offloaded optimizer's host AdamW, so it runs at the host's memory bandwidth: all OpenMP threads over fixed chunks,
// each chunk a vectorised loop built for the widest vector unit the processor has (AVX-512, AVX2, else the baseline),
// chosen when the program starts. Elementwise, and every variant computes each element with the same IEEE operations in
// the same order (no fused multiply-add: -ffp-contract=off for this file; division and square root are correctly
// rounded at any width), so any split over threads and any processor give the same bits.
#include <algorithm>
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Element operations per element: four streams read, three written, a square root and a division.
constexpr int64_t kAdamWCost = 4;
// Elements a thread updates at a time: large enough to stream, small enough to spread over the threads.
constexpr int64_t kChunk = int64_t{1} << 16;

struct Scalars {
  float b1, b2, lr, eps, gs, inv_bc1, inv_bc2;
  float wd, l2;  // one of the two is the decay, the other zero: decoupled (AdamW) or into the gradient (L2)
};

// One element of ops/cuda/adamw.cu's adamw_one; returns the updated weight.
__attribute__((always_inline)) inline float adamw_element(float& w, float g, float& m1, float& m2, const Scalars& s) {
  const float gi = g * s.gs + s.l2 * w;
  m1 = s.b1 * m1 + (1.0f - s.b1) * gi;
  m2 = s.b2 * m2 + (1.0f - s.b2) * gi * gi;
  const float m_hat = m1 * s.inv_bc1, v_hat = m2 * s.inv_bc2;
  // Decay uses the weight before this step's update, as in the formula.
  w -= s.lr * (m_hat / (std::sqrt(v_hat) + s.eps) + s.wd * w);
  return w;
}

// w, g, m1, m2 (n) f32.
__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_chunk(float* __restrict__ w,
                                                                              const float* __restrict__ g,
                                                                              float* __restrict__ m1,
                                                                              float* __restrict__ m2, int64_t n,
                                                                              const Scalars s) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) adamw_element(w[i], g[i], m1[i], m2[i], s);
}

// The same, and the updated weights rounded to bf16 into `out` (n) in the same pass (f32_to_bf16's rounding).
__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_chunk_bf16(
    float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m1, float* __restrict__ m2,
    Bf16* __restrict__ out, int64_t n, const Scalars s) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) store(out, i, adamw_element(w[i], g[i], m1[i], m2[i], s));
}

// The same with f16 (its conversion is a call, so this loop is not vectorised).
void adamw_chunk_f16(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m1, float* __restrict__ m2,
                     F16* __restrict__ out, int64_t n, const Scalars s) {
  for (int64_t i = 0; i < n; ++i) store(out, i, adamw_element(w[i], g[i], m1[i], m2[i], s));
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p,
                const Tensor& rounded) {
  const int64_t n = param.numel();
  float* w = param.f32();       // (n)
  const float* g = grad.f32();  // (n)
  float* m1 = m.f32();          // (n)
  float* m2 = v.f32();          // (n)
  Scalars s;
  // Bias corrections in double: beta2^step stays close to 1 for thousands of steps, where float loses digits.
  s.inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), p.step)));
  s.inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), p.step)));
  s.b1 = p.beta1;
  s.b2 = p.beta2;
  s.lr = p.lr;
  s.eps = p.eps;
  s.gs = p.grad_scale;
  s.wd = p.decoupled ? p.weight_decay : 0.0f;
  s.l2 = p.decoupled ? 0.0f : p.weight_decay;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (worth_parallel(n, kAdamWCost))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t first = c * kChunk, count = std::min(kChunk, n - first);
    if (!rounded.defined())
      adamw_chunk(w + first, g + first, m1 + first, m2 + first, count, s);
    else if (rounded.dtype() == DType::BF16)
      adamw_chunk_bf16(w + first, g + first, m1 + first, m2 + first, elems<Bf16>(rounded) + first, count, s);
    else
      adamw_chunk_f16(w + first, g + first, m1 + first, m2 + first, elems<F16>(rounded) + first, count, s);
  }
}

}  // namespace tandem::ops::cpu
