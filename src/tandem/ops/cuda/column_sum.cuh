// Deterministic column sums over a (rows, cols) matrix, for parameter gradients (bias, LayerNorm gamma and beta):
// pass 1 sums fixed slices of rows per column into an f32 scratch matrix, pass 2 adds the slices in a fixed order
// into the output. The slicing depends only on the shape and dtype (workspace.h), so the result is bit-identical
// from run to run, with no atomics. Pass 1 reads 16-byte packs of columns when the matrix allows it, several rows at
// once; pass 2 splits each column's slices over 8 threads, whose sums are added in thread order.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/cuda/workspace.h"

namespace tandem::ops::cuda {

template <int K>
struct ColumnValues {
  float v[K];
};

// General form: partial[k][s][c] = sum over rows r of slice s, in row order, of f(r, c).v[k]. One column a thread.
template <int K, class F>
__global__ void column_partials_kernel(F f, int64_t rows, int64_t cols, int64_t rows_per_slice,
                                       float* __restrict__ partial) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t slice = blockIdx.y;
  const int64_t slices = gridDim.y;
  if (col >= cols) return;
  const int64_t r0 = slice * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < rows ? r0 + rows_per_slice : rows;
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

// Packed form of the plain sum: partial[s][c] = sum over rows r of slice s, in row order, of x[r][c], a thread
// owning one 16-byte pack of columns and loading kColumnSumUnroll rows before adding them. cols is a whole number of
// packs and x is 16-byte aligned.
template <class T>
__global__ void column_partials_packed_kernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                                              int64_t rows_per_slice, float* __restrict__ partial) {
  constexpr int V = kPack<T>;
  constexpr int U = static_cast<int>(kColumnSumUnroll);
  const int64_t packs = cols / V;
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= packs) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < rows ? r0 + rows_per_slice : rows;
  const Pack<T>* src = reinterpret_cast<const Pack<T>*>(x) + p;  // pack p of row 0; row r at src[r * packs]
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.0f;
  int64_t r = r0;
  for (; r + U <= r1; r += U) {
    Pack<T> v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = src[(r + u) * packs];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += to_f32(v[u].v[k]);
    }
  }
  for (; r < r1; ++r) {
    const Pack<T> v = src[r * packs];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] += to_f32(v.v[k]);
  }
  float* out = partial + static_cast<int64_t>(blockIdx.y) * cols + p * V;
#pragma unroll
  for (int k = 0; k < V; ++k) out[k] = acc[k];
}

// Threads per column in the finishing pass, and columns per block: a block is 32 columns x 8 slice groups.
inline constexpr int kFinishGroups = 8;

// out_k[c] += the sum of partial[k][s][c] over slices s: group g (threadIdx.y) adds slices g, g + 8, ... in order,
// then the 8 group sums are added in group order. Grid: (ceil(cols / 32), K).
template <int K>
__global__ void column_finish_kernel(const float* __restrict__ partial, int64_t slices, int64_t cols, float* out0,
                                     float* out1) {
  __shared__ float sums[kFinishGroups][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int k = static_cast<int>(blockIdx.y);
  const int g = static_cast<int>(threadIdx.y);
  float s = 0.0f;
  if (col < cols) {
    const float* src = partial + static_cast<int64_t>(k) * slices * cols + col;  // slice i at src[i * cols]
#pragma unroll 4
    for (int64_t i = g; i < slices; i += kFinishGroups) s += src[i * cols];
  }
  sums[g][threadIdx.x] = s;
  __syncthreads();
  if (g == 0 && col < cols) {
    float total = sums[0][threadIdx.x];
#pragma unroll
    for (int j = 1; j < kFinishGroups; ++j) total += sums[j][threadIdx.x];
    float* out = k == 0 ? out0 : out1;
    out[col] += total;
  }
}

// Queues pass 2 over partial (K, slices, cols): out0 (and out1 when K == 2) += the column sums.
template <int K>
void column_finish(device::CudaDevice& dev, const float* partial, int64_t slices, int64_t cols, float* out0,
                   float* out1) {
  static_assert(K == 1 || K == 2);
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(K));
  column_finish_kernel<K>
      <<<grid, dim3(32, kFinishGroups), 0, dev.compute_stream()>>>(partial, slices, cols, out0, out1);
  TANDEM_CUDA_CHECK_LAUNCH();
}

// Adds the column sums of f over (rows, cols) into out0 (and out1 when K == 2), f32 vectors of cols elements, the
// matrix's elements being `elem_bytes` wide (the slicing of workspace.h). `like` is any tensor of the op (for the
// device). Scratch comes from the device arena and is released in stream order.
template <int K, class F>
void column_sums(const Tensor& like, F f, int64_t rows, int64_t cols, int64_t elem_bytes, float* out0, float* out1) {
  static_assert(K == 1 || K == 2);
  if (rows == 0 || cols == 0) return;
  device::CudaDevice& dev = cuda_device(like);
  const int64_t pack = pack_of(elem_bytes);
  const int64_t lanes = (cols + pack - 1) / pack;
  const int64_t per = column_sum_rows_per_slice(rows, lanes), slices = column_sum_slices(rows, lanes);
  TANDEM_CHECK(slices <= 65535, "column sum over ", rows, " rows exceeds the grid's y limit");
  Tensor partial = Tensor::empty({K, slices, cols}, DType::F32, dev, "column sum scratch");
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(slices));
  column_partials_kernel<K><<<grid, kThreads, 0, dev.compute_stream()>>>(f, rows, cols, per, partial.f32());
  TANDEM_CUDA_CHECK_LAUNCH();
  column_finish<K>(dev, partial.f32(), slices, cols, out0, out1);
}

// f(r, c) of the plain column sum: x[r][c].
template <class T>
struct PlainValue {
  const T* x;
  int64_t cols;
  __device__ ColumnValues<1> operator()(int64_t r, int64_t c) const { return {{to_f32(x[r * cols + c])}}; }
};

// out (cols) f32 += the column sums of x (rows, cols) in T: the packed pass when cols is a whole number of packs and
// x is 16-byte aligned, else one column a thread. Same slices either way.
template <class T>
void column_sums_of(const Tensor& like, const T* x, int64_t rows, int64_t cols, float* out) {
  if (rows == 0 || cols == 0) return;
  constexpr int V = kPack<T>;
  if (cols % V != 0 || !aligned16(x)) {
    column_sums<1>(like, PlainValue<T>{x, cols}, rows, cols, sizeof(T), out, nullptr);
    return;
  }
  device::CudaDevice& dev = cuda_device(like);
  const int64_t packs = cols / V;
  const int64_t per = column_sum_rows_per_slice(rows, packs), slices = column_sum_slices(rows, packs);
  TANDEM_CHECK(slices <= 65535, "column sum over ", rows, " rows exceeds the grid's y limit");
  Tensor partial = Tensor::empty({slices, cols}, DType::F32, dev, "column sum scratch");
  const dim3 grid(static_cast<unsigned>((packs + kThreads - 1) / kThreads), static_cast<unsigned>(slices));
  column_partials_packed_kernel<T><<<grid, kThreads, 0, dev.compute_stream()>>>(x, rows, cols, per, partial.f32());
  TANDEM_CUDA_CHECK_LAUNCH();
  column_finish<1>(dev, partial.f32(), slices, cols, out, nullptr);
}

}  // namespace tandem::ops::cuda
