// CUDA mixture-of-experts ops (ops.h): the router's softmax and top-k and its backward one thread per token, the
// balance sums one block per expert, the grouping of routed rows by expert as a stable per-expert scan, and the gather
// and weighted combine between tokens and routed rows one thread per element. Every sum runs in a fixed order (a
// thread's loop, or block_reduce's fixed tree), so the same inputs give the same bits on every run. Legend: N tokens,
// E experts, k choices, M = N k routed rows, C channels.
#include <vector>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

// logits, probs (N, E), idx, weights (N, k): softmax, then k passes for the largest not yet taken.
__global__ void route_kernel(const float* __restrict__ logits, float* __restrict__ probs, int32_t* __restrict__ idx,
                             float* __restrict__ weights, int64_t n, int e, int k, bool normalize) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float* row = logits + i * e;
    float* p = probs + i * e;
    float top = row[0];
    for (int j = 1; j < e; ++j) top = fmaxf(top, row[j]);
    float sum = 0.0f;
    for (int j = 0; j < e; ++j) sum += (p[j] = expf(row[j] - top));
    for (int j = 0; j < e; ++j) p[j] /= sum;
    int32_t* ci = idx + i * k;
    float* wi = weights + i * k;
    float picked = 0.0f;
    for (int s = 0; s < k; ++s) {
      int best = -1;
      for (int j = 0; j < e; ++j) {
        bool taken = false;
        for (int r = 0; r < s; ++r) taken |= ci[r] == j;
        if (!taken && (best < 0 || p[j] > p[best])) best = j;
      }
      ci[s] = best;
      wi[s] = p[best];
      picked += p[best];
    }
    if (normalize)
      for (int s = 0; s < k; ++s) wi[s] /= picked;
  }
}

// probs, dlogits (N, E), idx, dweights (N, k), aux (E) or null.
__global__ void route_backward_kernel(const float* __restrict__ probs, const int32_t* __restrict__ idx,
                                      const float* __restrict__ dweights, const float* __restrict__ aux,
                                      float* __restrict__ dlogits, int64_t n, int e, int k, bool normalize) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float* p = probs + i * e;
    const int32_t* ci = idx + i * k;
    const float* dw = dweights + i * k;
    float* dp = dlogits + i * e;  // dprobs first, then overwritten by dlogits
    for (int j = 0; j < e; ++j) dp[j] = aux ? aux[j] : 0.0f;
    float picked = 0.0f, dot = 0.0f;
    for (int s = 0; s < k; ++s) picked += p[ci[s]];
    if (normalize)
      for (int s = 0; s < k; ++s) dot += dw[s] * (p[ci[s]] / picked);
    for (int s = 0; s < k; ++s) dp[ci[s]] += normalize ? (dw[s] - dot) / picked : dw[s];
    float mean = 0.0f;
    for (int j = 0; j < e; ++j) mean += p[j] * dp[j];
    for (int j = 0; j < e; ++j) dp[j] = p[j] * (dp[j] - mean);
  }
}

// One block per expert j: counts[j] += its choices, probsum[j] += its column of probs.
__global__ void route_stats_kernel(const float* __restrict__ probs, const int32_t* __restrict__ idx,
                                   float* __restrict__ counts, float* __restrict__ probsum, int64_t n, int e, int k) {
  __shared__ float scratch[32];
  const int j = blockIdx.x;
  float hits = 0.0f, sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    sum += probs[i * e + j];
    for (int s = 0; s < k; ++s) hits += idx[i * k + s] == j ? 1.0f : 0.0f;
  }
  hits = block_reduce(hits, SumOp{}, 0.0f, scratch);
  sum = block_reduce(sum, SumOp{}, 0.0f, scratch);
  if (threadIdx.x == 0) {
    counts[j] += hits;
    probsum[j] += sum;
  }
}

__global__ void aux_loss_kernel(const float* __restrict__ counts, const float* __restrict__ probsum, float scale,
                                float* __restrict__ sum, int e) {
  float dot = 0.0f;
  for (int j = 0; j < e; ++j) dot += counts[j] * probsum[j];
  sum[0] += scale * dot;
}

// One block per expert j: offsets[j + 1] = how many of the m choices name j.
__global__ void order_count_kernel(const int32_t* __restrict__ idx, int32_t* __restrict__ offsets, int64_t m) {
  __shared__ int scratch[32];
  const int j = blockIdx.x;
  int hits = 0;
  for (int64_t r = threadIdx.x; r < m; r += blockDim.x) hits += idx[r] == j ? 1 : 0;
  hits = block_reduce(hits, SumOp{}, 0, scratch);
  if (threadIdx.x == 0) offsets[j + 1] = hits;
}

// The counts into offsets (one thread).
__global__ void order_offsets_kernel(int32_t* __restrict__ offsets, int e) {
  offsets[0] = 0;
  for (int j = 0; j < e; ++j) offsets[j + 1] += offsets[j];
}

// One block per expert j: its choices in order get the rows offsets[j], offsets[j] + 1, ...: the block scans the m
// choices a block-width at a time, each warp's hits counted by ballot, the warps' counts added in warp order.
__global__ void order_rows_kernel(const int32_t* __restrict__ idx, const int32_t* __restrict__ offsets,
                                  int32_t* __restrict__ pos, int64_t m) {
  __shared__ int warp_hits[32];
  const int j = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  int base = offsets[j];
  for (int64_t r0 = 0; r0 < m; r0 += blockDim.x) {
    const int64_t r = r0 + threadIdx.x;
    const bool hit = r < m && idx[r] == j;
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_hits[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < warps; ++w) {
      before += w < warp ? warp_hits[w] : 0;
      total += warp_hits[w];
    }
    if (hit) pos[r] = base + before + __popc(ballot & ((1u << lane) - 1u));
    base += total;
    __syncthreads();  // warp_hits is rewritten by the next pass
  }
}

template <class T>
__global__ void gather_kernel(const T* __restrict__ x, const int32_t* __restrict__ pos, T* __restrict__ xg, int64_t n,
                              int64_t c, int k) {
  const int64_t total = n * k * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t choice = e / c, j = e - choice * c;  // choice = t k + s
    xg[static_cast<int64_t>(pos[choice]) * c + j] = x[(choice / k) * c + j];
  }
}

// y (N, C) += weighted routed rows; weights null: each 1.
template <class T>
__global__ void combine_kernel(const T* __restrict__ yg, const int32_t* __restrict__ pos,
                               const float* __restrict__ weights, T* __restrict__ y, int64_t n, int64_t c, int k) {
  const int64_t total = n * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e / c, j = e - i * c;
    float acc = to_f32(y[e]);
    for (int s = 0; s < k; ++s)
      acc += (weights ? weights[i * k + s] : 1.0f) * to_f32(yg[static_cast<int64_t>(pos[i * k + s]) * c + j]);
    y[e] = from_f32<T>(acc);
  }
}

// dyg[pos[t, s]] = weights[t, s] dy[t], one thread per element.
template <class T>
__global__ void combine_backward_rows_kernel(const T* __restrict__ dy, const int32_t* __restrict__ pos,
                                             const float* __restrict__ weights, T* __restrict__ dyg, int64_t n,
                                             int64_t c, int k) {
  const int64_t total = n * k * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t choice = e / c, j = e - choice * c;
    dyg[static_cast<int64_t>(pos[choice]) * c + j] = from_f32<T>(weights[choice] * to_f32(dy[(choice / k) * c + j]));
  }
}

// dweights[t, s] = dy[t] . yg[pos[t, s]], one warp per choice: lane-strided partial sums, then the butterfly.
template <class T>
__global__ void combine_backward_weights_kernel(const T* __restrict__ dy, const T* __restrict__ yg,
                                                const int32_t* __restrict__ pos, float* __restrict__ dweights,
                                                int64_t n, int64_t c, int k) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t choice = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); choice < n * k;
       choice += warps) {
    const T* g = dy + (choice / k) * c;
    const T* r = yg + static_cast<int64_t>(pos[choice]) * c;
    float dot = 0.0f;
    for (int64_t j = lane; j < c; j += 32) dot += to_f32(g[j]) * to_f32(r[j]);
    dot = warp_reduce(dot, SumOp{});
    if (lane == 0) dweights[choice] = dot;
  }
}

}  // namespace

void moe_route(const Tensor& logits, int k, bool normalize, const Tensor& probs, const Tensor& idx,
               const Tensor& weights) {
  const int64_t n = logits.dim(0);
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(probs);
  route_kernel<<<grid_for(dev, n), kThreads, 0, dev.compute_stream()>>>(
      logits.f32(), probs.f32(), idx.i32(), weights.f32(), n, static_cast<int>(logits.dim(1)), k, normalize);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_route_backward(const Tensor& probs, const Tensor& idx, const Tensor& dweights, bool normalize,
                        const Tensor& aux, const Tensor& dlogits) {
  const int64_t n = probs.dim(0);
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(dlogits);
  route_backward_kernel<<<grid_for(dev, n), kThreads, 0, dev.compute_stream()>>>(
      probs.f32(), idx.i32(), dweights.f32(), aux.defined() ? aux.f32() : nullptr, dlogits.f32(), n,
      static_cast<int>(probs.dim(1)), static_cast<int>(idx.dim(1)), normalize);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_route_stats(const Tensor& probs, const Tensor& idx, const Tensor& counts, const Tensor& probsum) {
  device::CudaDevice& dev = cuda_device(counts);
  const int e = static_cast<int>(probs.dim(1));
  route_stats_kernel<<<e, kThreads, 0, dev.compute_stream()>>>(probs.f32(), idx.i32(), counts.f32(), probsum.f32(),
                                                               probs.dim(0), e, static_cast<int>(idx.dim(1)));
  TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_aux_loss(const Tensor& counts, const Tensor& probsum, float scale, const Tensor& sum) {
  device::CudaDevice& dev = cuda_device(sum);
  aux_loss_kernel<<<1, 1, 0, dev.compute_stream()>>>(counts.f32(), probsum.f32(), scale, sum.f32(),
                                                     static_cast<int>(counts.numel()));
  TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_order(const Tensor& idx, int experts, const Tensor& pos, const Tensor& offsets) {
  device::CudaDevice& dev = cuda_device(pos);
  const int64_t m = idx.numel();
  order_count_kernel<<<experts, kThreads, 0, dev.compute_stream()>>>(idx.i32(), offsets.i32(), m);
  TANDEM_CUDA_CHECK_LAUNCH();
  order_offsets_kernel<<<1, 1, 0, dev.compute_stream()>>>(offsets.i32(), experts);
  TANDEM_CUDA_CHECK_LAUNCH();
  order_rows_kernel<<<experts, kThreads, 0, dev.compute_stream()>>>(idx.i32(), offsets.i32(), pos.i32(), m);
  TANDEM_CUDA_CHECK_LAUNCH();
}

std::vector<int64_t> moe_expert_rows(const Tensor& offsets, int64_t rows) {
  device::CudaDevice& dev = cuda_device(offsets);
  std::vector<int32_t> off(static_cast<size_t>(offsets.numel()));
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(off.data(), offsets.raw(), offsets.nbytes(), cudaMemcpyDeviceToHost, dev.compute_stream()));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(dev.compute_stream()));
  const size_t e = off.size() - 1;
  TANDEM_CHECK(off[0] == 0 && off[e] == rows, "moe_expert_rows: offsets run from ", off[0], " to ", off[e],
               ", not 0 to ", rows);
  std::vector<int64_t> out(e);
  for (size_t j = 0; j < e; ++j) out[j] = off[j + 1] - off[j];
  return out;
}

void moe_gather(const Tensor& x, const Tensor& pos, const Tensor& xg) {
  const int64_t n = x.dim(0), c = x.dim(1);
  const int k = static_cast<int>(pos.dim(1));
  if (n == 0 || c == 0) return;
  device::CudaDevice& dev = cuda_device(xg);
  dispatch_float(x.dtype(), "moe_gather", [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<grid_for(dev, n * k * c), kThreads, 0, dev.compute_stream()>>>(x.data<T>(), pos.i32(),
                                                                                      xg.data<T>(), n, c, k);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void moe_combine(const Tensor& yg, const Tensor& pos, const Tensor& weights, const Tensor& y) {
  const int64_t n = y.dim(0), c = y.dim(1);
  const int k = static_cast<int>(pos.dim(1));
  if (n == 0 || c == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  dispatch_float(y.dtype(), "moe_combine", [&](auto tag) {
    using T = decltype(tag);
    combine_kernel<T><<<grid_for(dev, n * c), kThreads, 0, dev.compute_stream()>>>(
        yg.data<T>(), pos.i32(), weights.defined() ? weights.f32() : nullptr, y.data<T>(), n, c, k);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void moe_combine_backward(const Tensor& dy, const Tensor& yg, const Tensor& pos, const Tensor& weights,
                          const Tensor& dyg, const Tensor& dweights) {
  const int64_t n = dy.dim(0), c = dy.dim(1);
  const int k = static_cast<int>(pos.dim(1));
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(dyg);
  dispatch_float(dy.dtype(), "moe_combine_backward", [&](auto tag) {
    using T = decltype(tag);
    combine_backward_rows_kernel<T><<<grid_for(dev, n * k * c), kThreads, 0, dev.compute_stream()>>>(
        dy.data<T>(), pos.i32(), weights.f32(), dyg.data<T>(), n, c, k);
    TANDEM_CUDA_CHECK_LAUNCH();
    combine_backward_weights_kernel<T><<<grid_for(dev, n * k * 32), kThreads, 0, dev.compute_stream()>>>(
        dy.data<T>(), yg.data<T>(), pos.i32(), dweights.f32(), n, c, k);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
