// The block sums of cuDNN's deterministic attention backward (attention_blocks.h): one thread a pack of 8 16-bit
// values (width is a multiple of 8: cuDNN's shapes), rows of `width` columns `row_stride` apart in dqkv.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "tandem/ops/cuda/attention_blocks.h"
#include "tandem/ops/cuda/kernel_util.cuh"

namespace tandem::ops::cuda {
namespace {

constexpr int kThreads = 256;

// One pack: element (b, j, c..c+7) of kv and acc, for j < keys.
template <class T, bool kFinish>
__global__ void block_sums_kernel(float* __restrict__ acc, T* __restrict__ kv, int64_t t, int64_t width,
                                  int64_t row_stride, int64_t keys, int64_t summed, int64_t packs) {
  const int64_t per_row = width / 8;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = p / per_row, c = (p % per_row) * 8;  // row over (b, j), j < keys
    const int64_t bi = row / keys, j = row % keys;
    float* a = acc + (bi * t + j) * width + c;
    T* x = kv + (bi * t + j) * row_stride + c;
    Pack<T> in = *reinterpret_cast<const Pack<T>*>(x);
    float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
    if (j < summed) {
      lo = reinterpret_cast<const float4*>(a)[0];
      hi = reinterpret_cast<const float4*>(a)[1];
    }
    const float sum[8] = {lo.x + to_f32(in.v[0]), lo.y + to_f32(in.v[1]), lo.z + to_f32(in.v[2]),
                          lo.w + to_f32(in.v[3]), hi.x + to_f32(in.v[4]), hi.y + to_f32(in.v[5]),
                          hi.z + to_f32(in.v[6]), hi.w + to_f32(in.v[7])};
    if (kFinish) {
      Pack<T> out;
      for (int k = 0; k < 8; ++k) out.v[k] = from_f32<T>(sum[k]);
      *reinterpret_cast<Pack<T>*>(x) = out;
    } else {
      reinterpret_cast<float4*>(a)[0] = make_float4(sum[0], sum[1], sum[2], sum[3]);
      reinterpret_cast<float4*>(a)[1] = make_float4(sum[4], sum[5], sum[6], sum[7]);
    }
  }
}

__global__ void lengths_kernel(int32_t* __restrict__ lengths, int64_t b, int64_t t, int64_t rows, bool split,
                               int64_t n) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < n;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t block = p / (2 * b), first = block * rows, own = t - first < rows ? t - first : rows;
    const int64_t keys = split && own == rows ? first : first + own;
    lengths[p] = static_cast<int32_t>(p % (2 * b) < b ? own : keys);  // queries, then keys
  }
}

// One pack of 8: element (e, r, c..c+7) of a split block's dq.
template <class T>
__global__ void add_dq_kernel(T* __restrict__ dq, const T* __restrict__ beside, int64_t t, int64_t row_stride,
                              int64_t hd, int64_t first, int64_t rows, int64_t packs) {
  const int64_t per_row = hd / 8;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = p / per_row, c = (p % per_row) * 8;  // row over (e, r)
    const int64_t e = row / rows, r = row % rows;
    T* x = dq + (e * t + first + r) * row_stride + c;
    const Pack<T> side = *reinterpret_cast<const Pack<T>*>(beside + row * hd + c);
    Pack<T> out;
    if (first > 0) {
      const Pack<T> in = *reinterpret_cast<const Pack<T>*>(x);
      for (int k = 0; k < 8; ++k) out.v[k] = from_f32<T>(to_f32(in.v[k]) + to_f32(side.v[k]));
    } else {
      out = side;
    }
    *reinterpret_cast<Pack<T>*>(x) = out;
  }
}

template <bool kFinish>
cudaError_t launch(const BlockSums& s, int64_t keys, int64_t summed, cudaStream_t stream) {
  const int64_t packs = s.b * keys * (s.width / 8);
  if (packs == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((packs + kThreads - 1) / kThreads, int64_t{132} * 16);
  if (s.f16)
    block_sums_kernel<__half, kFinish><<<blocks, kThreads, 0, stream>>>(s.acc, static_cast<__half*>(s.kv), s.t, s.width,
                                                                        s.row_stride, keys, summed, packs);
  else
    block_sums_kernel<__nv_bfloat16, kFinish><<<blocks, kThreads, 0, stream>>>(
        s.acc, static_cast<__nv_bfloat16*>(s.kv), s.t, s.width, s.row_stride, keys, summed, packs);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_blocks_lengths(int32_t* lengths, int64_t b, int64_t t, int64_t rows, bool split,
                                     cudaStream_t stream) {
  const int64_t n = 2 * b * ((t + rows - 1) / rows);
  if (n == 0) return cudaSuccess;
  lengths_kernel<<<std::min<int64_t>((n + kThreads - 1) / kThreads, 1024), kThreads, 0, stream>>>(lengths, b, t, rows,
                                                                                                  split, n);
  return cudaGetLastError();
}

cudaError_t attention_blocks_add_dq(void* dq, const void* beside, int64_t b, int64_t t, int64_t row_stride, int64_t hd,
                                    int64_t first, int64_t rows, bool f16, cudaStream_t stream) {
  const int64_t packs = b * rows * (hd / 8);
  if (packs == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((packs + kThreads - 1) / kThreads, int64_t{132} * 16);
  if (f16)
    add_dq_kernel<__half><<<blocks, kThreads, 0, stream>>>(static_cast<__half*>(dq), static_cast<const __half*>(beside),
                                                           t, row_stride, hd, first, rows, packs);
  else
    add_dq_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dq),
                                                                  static_cast<const __nv_bfloat16*>(beside), t,
                                                                  row_stride, hd, first, rows, packs);
  return cudaGetLastError();
}

cudaError_t attention_blocks_add(const BlockSums& s, int64_t keys, int64_t summed, cudaStream_t stream) {
  return launch<false>(s, keys, summed, stream);
}

cudaError_t attention_blocks_finish(const BlockSums& s, int64_t summed, cudaStream_t stream) {
  return launch<true>(s, s.t, summed, stream);
}

}  // namespace tandem::ops::cuda
