// Deterministic column sums over a (rows, cols) matrix, for parameter gradients (bias, LayerNorm gamma and beta):
// pass 1 sums fixed slices of rows per column into a scratch matrix, pass 2 adds the slices in slice order.
// The slicing depends only on the shape, so the result is bit-identical from run to run, with no atomics.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"

namespace tandem::ops::cuda {

// Rows per slice: enough work per thread to hide latency, and for 8192 rows still 128 slices to fill the GPU.
inline constexpr int64_t kRowsPerSlice = 64;

template <int K>
struct ColumnValues {
  float v[K];
};

// partial[k][s][c] = sum over rows r of slice s, in row order, of f(r, c).v[k]. Block: 256 columns of one slice.
template <int K, class F>
__global__ void column_partials_kernel(F f, int64_t rows, int64_t cols, float* __restrict__ partial) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t slice = blockIdx.y;
  const int64_t slices = gridDim.y;
  if (col >= cols) return;
  const int64_t r0 = slice * kRowsPerSlice;
  const int64_t r1 = r0 + kRowsPerSlice < rows ? r0 + kRowsPerSlice : rows;
  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const ColumnValues<K> x = f(r, col);
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] += x.v[k];
  }
#pragma unroll
  for (int k = 0; k < K; ++k) partial[(k * slices + slice) * cols + col] = acc[k];
}

// out_k[c] += sum over slices s, in order, of partial[k][s][c].
template <int K>
__global__ void column_finish_kernel(const float* __restrict__ partial, int64_t slices, int64_t cols, float* out0,
                                     float* out1) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < cols; col += stride) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float s = 0.0f;
      for (int64_t i = 0; i < slices; ++i) s += partial[(k * slices + i) * cols + col];
      float* out = k == 0 ? out0 : out1;
      out[col] += s;
    }
  }
}

// Adds the column sums of f over (rows, cols) into out0 (and out1 when K == 2), f32 vectors of cols elements.
// `like` is any tensor of the op (for the device). Scratch comes from the device arena and is released in stream order.
template <int K, class F>
void column_sums(const Tensor& like, F f, int64_t rows, int64_t cols, float* out0, float* out1) {
  static_assert(K == 1 || K == 2);
  if (rows == 0 || cols == 0) return;
  device::CudaDevice& dev = cuda_device(like);
  const cudaStream_t stream = dev.compute_stream();
  const int64_t slices = (rows + kRowsPerSlice - 1) / kRowsPerSlice;
  TANDEM_CHECK(slices <= 65535, "column sum over ", rows, " rows exceeds the grid's y limit");
  Tensor partial = Tensor::empty({K, slices, cols}, DType::F32, dev, "column sum scratch");
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(slices));
  column_partials_kernel<K><<<grid, kThreads, 0, stream>>>(f, rows, cols, partial.f32());
  TANDEM_CUDA_CHECK_LAUNCH();
  column_finish_kernel<K><<<grid_for(dev, cols), kThreads, 0, stream>>>(partial.f32(), slices, cols, out0, out1);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::ops::cuda
