// CUDA AdamW: one fused Adam step over flat fp32 buffers (param, grad, m, v), with decoupled weight decay or
// with L2 regularisation. Elementwise, grid-stride, float4 packs when all four buffers allow them; same formula
// as ops/cpu/adamw.cc.
#include <cmath>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"

namespace tandem::ops::cuda {
namespace {

struct AdamWScalars {
  float b1, b2, lr, eps, gs, inv_bc1, inv_bc2;
  float wd, l2;  // one of the two is the decay, the other zero: decoupled (AdamW) or into the gradient (L2)
};

__device__ __forceinline__ void adamw_one(float& w, float g, float& m1, float& m2, const AdamWScalars& s) {
  const float gi = g * s.gs + s.l2 * w;
  m1 = s.b1 * m1 + (1.0f - s.b1) * gi;
  m2 = s.b2 * m2 + (1.0f - s.b2) * gi * gi;
  const float m_hat = m1 * s.inv_bc1, v_hat = m2 * s.inv_bc2;
  // Decay uses the weight before this step's update, as in the formula.
  w -= s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + s.wd * w);
}

// w, g, m1, m2 (n) f32.
template <bool kVector>
__global__ void adamw_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m1,
                             float* __restrict__ m2, int64_t n, AdamWScalars s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t head = 0;
  if constexpr (kVector) {
    auto* pw = reinterpret_cast<float4*>(w);
    const auto* pg = reinterpret_cast<const float4*>(g);
    auto* pm = reinterpret_cast<float4*>(m1);
    auto* pv = reinterpret_cast<float4*>(m2);
    for (int64_t i = tid; i < n / 4; i += stride) {
      float4 a = pw[i], b = pm[i], c = pv[i];
      const float4 d = pg[i];
      adamw_one(a.x, d.x, b.x, c.x, s);
      adamw_one(a.y, d.y, b.y, c.y, s);
      adamw_one(a.z, d.z, b.z, c.z, s);
      adamw_one(a.w, d.w, b.w, c.w, s);
      pw[i] = a;
      pm[i] = b;
      pv[i] = c;
    }
    head = n / 4 * 4;
  }
  for (int64_t i = head + tid; i < n; i += stride) adamw_one(w[i], g[i], m1[i], m2[i], s);
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p,
                const Tensor& rounded) {
  for (const Tensor* t : {&param, &grad, &m, &v}) check_dtype("adamw_step", "param, grad, m and v", *t, DType::F32);
  const int64_t n = param.numel();
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(param);
  // Bias corrections in double on the host: beta2^step stays close to 1 for thousands of steps.
  AdamWScalars s{};
  s.b1 = p.beta1;
  s.b2 = p.beta2;
  s.lr = p.lr;
  s.eps = p.eps;
  s.wd = p.decoupled ? p.weight_decay : 0.0f;
  s.l2 = p.decoupled ? 0.0f : p.weight_decay;
  s.gs = p.grad_scale;
  s.inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), p.step)));
  s.inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), p.step)));
  const bool vector = aligned16(param.raw()) && aligned16(grad.raw()) && aligned16(m.raw()) && aligned16(v.raw());
  if (vector) {
    adamw_kernel<true><<<grid_for(dev, std::max<int64_t>(n / 4, n % 4)), kThreads, 0, dev.compute_stream()>>>(
        param.f32(), grad.f32(), m.f32(), v.f32(), n, s);
  } else {
    adamw_kernel<false>
        <<<grid_for(dev, n), kThreads, 0, dev.compute_stream()>>>(param.f32(), grad.f32(), m.f32(), v.f32(), n, s);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
  // The device's own optimizer casts its owned values in a pass of their own (ParameterStore::refresh_values); the
  // rounded copy, asked for by the host's optimizer, is that cast here.
  if (rounded.defined()) cast(param, rounded);
}

}  // namespace tandem::ops::cuda
