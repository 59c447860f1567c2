// CPU AdamW: one Adam step over flat fp32 buffers (param, grad, m, v), with decoupled weight decay or with
// L2 regularisation (the decay added to the gradient). Elementwise, so any split over threads gives the same
// bits.
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Element operations per element: four streams read, three written, a square root and a division.
constexpr int64_t kAdamWCost = 4;

}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p) {
  const int64_t n = param.numel();
  float* w = param.f32();       // (n)
  const float* g = grad.f32();  // (n)
  float* m1 = m.f32();          // (n)
  float* m2 = v.f32();          // (n)
  // Bias corrections in double: beta2^step stays close to 1 for thousands of steps, where float loses digits.
  const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), p.step)));
  const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), p.step)));
  const float b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, gs = p.grad_scale;
  // One of the two is the decay, the other zero: decoupled from the moments (AdamW), or into the gradient (L2).
  const float wd = p.decoupled ? p.weight_decay : 0.0f, l2 = p.decoupled ? 0.0f : p.weight_decay;
#pragma omp parallel for schedule(static) if (worth_parallel(n, kAdamWCost))
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs + l2 * w[i];
    m1[i] = b1 * m1[i] + (1.0f - b1) * gi;
    m2[i] = b2 * m2[i] + (1.0f - b2) * gi * gi;
    const float m_hat = m1[i] * inv_bc1, v_hat = m2[i] * inv_bc2;
    // Decay uses the weight before this step's update, as in the formula.
    w[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * w[i]);
  }
}

}  // namespace tandem::ops::cpu
