// CUDA FP8 (ops.h, "FP8"): amax and fp8_quantize, on the compute stream, no host sync. fp8_matmul is in gemm.cc.
//
// amax: |x| of a non-negative fp32 is ordered as its bits are, and a NaN's bits (exponent all ones, mantissa not
// zero) lie above inf's, so the largest magnitude is an integer maximum: each thread takes the maximum of the bits of
// its elements' |x| (16-byte loads where x is aligned), the block reduces them, and one atomicMax per block merges
// them into the output, zeroed first. A block's NaN is written as the CPU's quiet NaN (0x7fc00000), so the result is
// the CPU's bits whatever NaN x held.
//
// fp8_quantize: every thread computes the scale from amax on the device with fp8_scale_exponent (fp8_scale.h, the
// CPU's function), q = fp8(x * 2^e) through the hardware conversion (round to nearest even, saturating to the largest
// finite value, NaN to 0x7f: the CPU's f32_to_e4m3 / f32_to_e5m2). x * 2^e is exact, so the bytes equal the CPU's.
// Without q_t: one pass over the flat tensor, 16 elements a thread (16-byte loads, one 16-byte store). With q_t: one
// pass over 64 x 64 tiles of x, each block rounding its tile once, writing q from registers and staging the tile's
// bytes in shared memory (16-byte groups swizzled by 16-row band), from which the block writes q_t's rows: 4 lanes a
// row, each reading 16 bytes down one column of the tile (no bank conflicts: the 4 bands sit on distinct banks), so
// each warp stores 8 rows of 64 contiguous bytes (whole sectors).
// Block 0 writes inv_scale = 2^-e, or NaN when amax is not finite.
//
// Several scales (blocks, fp8_scale.h): both ops go over the same 64 x 64 tiles of x, with the blocks in x's
// coordinates (those of x^T's blocks swapped when the output is transposed). Every block extent along each dimension
// of x must be 1, a multiple of 64 or the whole extent, so that a tile meets one block, one block per row of the tile
// (1-row blocks: x's rowwise and 1 x 128 scales) or one per column (x^T's). amax reduces a tile's |x| bits per row
// (the 4 lanes of a row, by shuffles), per column (through shared memory) or over the tile, then one atomicMax per
// row, column or tile into the zeroed output; where the grid stays large, a block takes up to 8 tiles along the rows
// or down the columns that one block of x spans, for fewer atomics. fp8_quantize has the tile kernel look its tile's
// scales up (one, or one per row or column, into shared memory, while its loads of x are in flight), then round as
// above, each element with its block's scale. q alone, when each 16-element segment of a row lies in one block (blocks
// of x rather than x^T), goes flat as with one scale, each segment looking its scale up; otherwise through the tile
// kernel without its transposed stage. The threads write inv_scale (every entry, padding included: 1 from an amax of 0)
// in a grid-stride loop.
#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/fp8_scale.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr uint32_t kQuietNaN = 0x7fc00000u;  // std::numeric_limits<float>::quiet_NaN(), the CPU's NaN
constexpr uint32_t kInfBits = 0x7f800000u;
constexpr int kAmaxUnroll = 4;  // 16-byte loads in flight per thread
constexpr int kChunk = 16;      // elements a thread rounds at once: 16 bytes of FP8
constexpr int kTile = 64;       // the transposing kernel's tiles: 64 x 64 elements, 256 threads

// ---- blocks of several scales, in x's coordinates ----

// How one 64 x 64 tile of x meets the blocks that share a scale: one scale for the whole tensor (the per-tensor
// kernels), one block for the tile, one per row of the tile, or one per column.
enum class TileBlocks : int { kSingle, kTile, kRow, kColumn };

// The blocks of an output's scale grid seen from x (R, C): element (i, j) of x lies in the block whose amax and scale
// sit at at(i, j). For q (blocks of x) the grid's own extents and strides; for q_t (blocks of x^T) both swapped.
// The kernels compute at() once a tile (the tile's first element) and step from there: the divisions are 32-bit
// (x's extents are checked to fit), and within a tile the index moves by a stride per row (kRow) or column (kColumn).
struct XBlocks {
  uint32_t rows = 1, cols = 1;             // a block's extent along x's rows and columns
  int64_t row_stride = 0, col_stride = 0;  // the index step of one block along x's rows and columns
  __device__ __forceinline__ int64_t at(int64_t i, int64_t j) const {
    return static_cast<int64_t>(static_cast<uint32_t>(i) / rows) * row_stride +
           static_cast<int64_t>(static_cast<uint32_t>(j) / cols) * col_stride;
  }
};

XBlocks x_blocks(const Fp8ScaleGrid& g, bool transposed) {
  const auto narrow = [](int64_t e) { return static_cast<uint32_t>(e); };  // <= x's extent (tile_blocks checks it)
  return transposed ? XBlocks{narrow(g.block_cols), narrow(g.block_rows), g.col_stride, g.row_stride}
                    : XBlocks{narrow(g.block_rows), narrow(g.block_cols), g.row_stride, g.col_stride};
}

// The tile kernels' case for blocks b of x (R, C), or a refusal naming them: along each dimension of x a block must
// be one element, a multiple of the tile or the whole extent (not one element along both), so that no tile crosses
// a block boundary except between its rows or between its columns.
TileBlocks tile_blocks(const char* op, const Tensor& x, Fp8Blocks blocks, bool transposed, const XBlocks& b) {
  const int64_t r = rows_of(x), c = cols_of(x);
  TANDEM_CHECK(r <= UINT32_MAX && c <= UINT32_MAX, op, ": x ", shape_str(x.shape()),
               " has more than 2^32 rows or columns, more than the block kernels index");
  const bool rows_whole = b.rows % kTile == 0 || b.rows >= r, cols_whole = b.cols % kTile == 0 || b.cols >= c;
  if (rows_whole && cols_whole) return TileBlocks::kTile;
  if (b.rows == 1 && cols_whole) return TileBlocks::kRow;
  if (b.cols == 1 && rows_whole) return TileBlocks::kColumn;
  TANDEM_FAIL(op, ": blocks ", blocks.rows, " x ", blocks.cols, " of ", transposed ? "x^T" : "x", " are ", b.rows,
              " x ", b.cols, " elements of x ", shape_str(x.shape()), "; the CUDA kernels take blocks whose extent ",
              "along each dimension of x is 1, a multiple of ", kTile, " or the whole extent (not 1 along both)");
}

// Calls f with the case as a compile-time constant (std::integral_constant).
template <class F>
void with_tile_blocks(TileBlocks m, F&& f) {
  switch (m) {
    case TileBlocks::kSingle:
      f(std::integral_constant<TileBlocks, TileBlocks::kSingle>{});
      return;
    case TileBlocks::kTile:
      f(std::integral_constant<TileBlocks, TileBlocks::kTile>{});
      return;
    case TileBlocks::kRow:
      f(std::integral_constant<TileBlocks, TileBlocks::kRow>{});
      return;
    case TileBlocks::kColumn:
      f(std::integral_constant<TileBlocks, TileBlocks::kColumn>{});
      return;
  }
}

// ---- loads ----

// v = 16 elements from 16-byte aligned p.
template <class T>
__device__ __forceinline__ void load16(const T* p, float (&v)[kChunk]) {
  constexpr int P = kPack<T>;
  const auto* packs = reinterpret_cast<const Pack<T>*>(p);
  Pack<T> raw[kChunk / P];
#pragma unroll
  for (int h = 0; h < kChunk / P; ++h) raw[h] = packs[h];
#pragma unroll
  for (int h = 0; h < kChunk / P; ++h)
#pragma unroll
    for (int k = 0; k < P; ++k) v[h * P + k] = to_f32(raw[h].v[k]);
}

// v = 16 elements from 16-byte aligned p, times s.
template <class T>
__device__ __forceinline__ void load_scaled(const T* p, float s, float (&v)[kChunk]) {
  load16(p, v);
#pragma unroll
  for (int k = 0; k < kChunk; ++k) v[k] *= s;
}

// v = x[i, j .. j + 16) of x (R, C), 0 outside it. kVec: 16-byte loads (the segment wholly inside or outside).
template <class T, bool kVec>
__device__ __forceinline__ void load_segment(const T* __restrict__ x, int64_t r, int64_t c, int64_t i, int64_t j,
                                             float (&v)[kChunk]) {
  if constexpr (kVec) {
    if (i < r && j < c) {
      load16(x + i * c + j, v);
    } else {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) v[k] = 0.0f;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kChunk; ++k) v[k] = i < r && j + k < c ? to_f32(x[i * c + j + k]) : 0.0f;
  }
}

// ---- amax ----

struct MaxBitsOp {
  __device__ __forceinline__ uint32_t operator()(uint32_t a, uint32_t b) const { return a > b ? a : b; }
};

__device__ __forceinline__ uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// The bits an amax is written with: a NaN's as the CPU's quiet NaN.
__device__ __forceinline__ uint32_t amax_bits(uint32_t bits) { return bits > kInfBits ? kQuietNaN : bits; }

// out (uint32, zeroed) = max over the grid of the bits of |x|. `packed`: x is 16-byte aligned; its first n / P
// elements go in packs of P, the rest one by one.
template <class T>
__global__ void amax_kernel(const T* __restrict__ x, int64_t n, bool packed, uint32_t* __restrict__ out) {
  __shared__ uint32_t scratch[32];
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uint32_t best = 0;
  int64_t tail = 0;
  if (packed) {
    constexpr int P = kPack<T>;
    const int64_t packs = n / P;
    const auto* p = reinterpret_cast<const Pack<T>*>(x);
    for (int64_t i = tid; i < packs; i += kAmaxUnroll * stride) {
      Pack<T> v[kAmaxUnroll];
#pragma unroll
      for (int u = 0; u < kAmaxUnroll; ++u)
        if (i + u * stride < packs) v[u] = p[i + u * stride];
#pragma unroll
      for (int u = 0; u < kAmaxUnroll; ++u)
        if (i + u * stride < packs) {
#pragma unroll
          for (int k = 0; k < P; ++k) best = max(best, abs_bits(to_f32(v[u].v[k])));
        }
    }
    tail = packs * P;
  }
  for (int64_t i = tail + tid; i < n; i += stride) best = max(best, abs_bits(to_f32(x[i])));
  best = block_reduce(best, MaxBitsOp{}, 0u, scratch);
  if (threadIdx.x == 0 && best != 0) atomicMax(out, amax_bits(best));
}

// out (uint32, zeroed; the grid's layout) = max of the bits of |x| over each block b of x (R, C), 256 threads a
// block: thread t takes 16 columns of tile row t / 4 (as the quantize kernels round them) in each of `span` 64 x 64
// tiles (kRow: side by side along the rows, kColumn: stacked down the columns, all in the same blocks of x; kTile:
// one), keeping the maximum per row (kRow, kTile) or per column (kColumn) of its segment; the block reduces them per
// row (the row's 4 lanes), per column (the bits through shared memory: 4 quarters of 16 rows, then the quarters) or
// whole, then one atomicMax per row, column or tile.
template <class T, bool kVec, TileBlocks kMode>
__global__ void __launch_bounds__(256)
    amax_tiles_kernel(const T* __restrict__ x, int64_t r, int64_t c, XBlocks b, int span, uint32_t* __restrict__ out) {
  const int64_t tiles_c = (c + kTile - 1) / kTile;
  const int64_t groups_c = kMode == TileBlocks::kRow ? (tiles_c + span - 1) / span : tiles_c;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) / groups_c * kTile * (kMode == TileBlocks::kColumn ? span : 1);
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) % groups_c * kTile * (kMode == TileBlocks::kRow ? span : 1);
  const int row = threadIdx.x / 4, seg = threadIdx.x % 4 * kChunk;
  if constexpr (kMode == TileBlocks::kColumn) {
    uint32_t most[kChunk] = {};  // the segment's columns over the span's rows
#pragma unroll 2
    for (int t = 0; t < span; ++t) {
      float v[kChunk];
      load_segment<T, kVec>(x, r, c, r0 + t * kTile + row, c0 + seg, v);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) most[k] = max(most[k], abs_bits(v[k]));
    }
    __shared__ uint32_t bits[kTile][kTile + 1];  // padded: a warp's column reads fall on distinct banks
    __shared__ uint32_t quarters[4][kTile];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) bits[row][seg + k] = most[k];
    __syncthreads();
    const int col = threadIdx.x % kTile, quarter = threadIdx.x / kTile;
    uint32_t best = 0;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) best = max(best, bits[quarter * kChunk + k][col]);
    quarters[quarter][col] = best;
    __syncthreads();
    if (threadIdx.x < kTile && c0 + threadIdx.x < c) {
      best = max(max(quarters[0][threadIdx.x], quarters[1][threadIdx.x]),
                 max(quarters[2][threadIdx.x], quarters[3][threadIdx.x]));
      if (best != 0) atomicMax(out + b.at(r0, c0) + threadIdx.x * b.col_stride, amax_bits(best));
    }
  } else {
    uint32_t best = 0;
#pragma unroll 2
    for (int t = 0; t < span; ++t) {
      float v[kChunk];
      load_segment<T, kVec>(x, r, c, r0 + row, c0 + t * kTile + seg, v);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) best = max(best, abs_bits(v[k]));
    }
    if constexpr (kMode == TileBlocks::kRow) {
      best = max(best, __shfl_xor_sync(0xffffffffu, best, 1));
      best = max(best, __shfl_xor_sync(0xffffffffu, best, 2));
      if (threadIdx.x % 4 == 0 && r0 + row < r && best != 0)
        atomicMax(out + b.at(r0, c0) + row * b.row_stride, amax_bits(best));
    } else {
      __shared__ uint32_t scratch[32];
      best = block_reduce(best, MaxBitsOp{}, 0u, scratch);
      if (threadIdx.x == 0 && best != 0) atomicMax(out + b.at(r0, c0), amax_bits(best));
    }
  }
}

// ---- fp8_quantize ----

template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ uint8_t to_fp8(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, F);
}

// Rounds v[0..16) to FP8, v[0] in the lowest byte.
template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ uint4 to_fp8x16(const float (&v)[kChunk]) {
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v[4 * j], v[4 * j + 1]), __NV_SATFINITE, F);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v[4 * j + 2], v[4 * j + 3]), __NV_SATFINITE, F);
    w[j] = lo | (hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The scale 2^e of the format whose largest finite value is 1.75 * 2^max_exp, from amax; `finite` as
// fp8_scale_exponent sets it.
__device__ __forceinline__ float scale_of(float amax, int max_exp, bool* finite) {
  return fp8_pow2(fp8_scale_exponent(amax, max_exp, finite));
}

// The scale from the one amax; block 0's thread 0 writes inv_scale.
__device__ __forceinline__ float scale_from(const float* amax, int max_exp, float* inv_scale) {
  bool finite = true;
  const int e = fp8_scale_exponent(__ldg(amax), max_exp, &finite);
  if (blockIdx.x == 0 && threadIdx.x == 0) *inv_scale = finite ? fp8_pow2(-e) : __uint_as_float(kQuietNaN);
  return fp8_pow2(e);
}

// q (n) = fp8(x * s), flat. `packed`: x and q 16-byte aligned; the first n / 16 chunks go 16 elements a thread.
template <class T, __nv_fp8_interpretation_t F>
__global__ void quantize_flat_kernel(const T* __restrict__ x, int64_t n, bool packed, const float* __restrict__ amax,
                                     int max_exp, uint8_t* __restrict__ q, float* __restrict__ inv_scale) {
  const float s = scale_from(amax, max_exp, inv_scale);
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if (packed) {
    const int64_t chunks = n / kChunk;
    for (int64_t i = tid; i < chunks; i += stride) {
      float v[kChunk];
      load_scaled(x + i * kChunk, s, v);
      reinterpret_cast<uint4*>(q)[i] = to_fp8x16<F>(v);
    }
    tail = chunks * kChunk;
  }
  for (int64_t i = tail + tid; i < n; i += stride) q[i] = to_fp8<F>(to_f32(x[i]) * s);
}

// Writes inv_scale[k] = 2^-e for every block k of `count` (padding included), over the grid.
__device__ __forceinline__ void write_inv_scales(const float* __restrict__ amax, int max_exp,
                                                 float* __restrict__ inv_scale, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < count; k += stride) {
    bool finite = true;
    const int e = fp8_scale_exponent(__ldg(amax + k), max_exp, &finite);
    inv_scale[k] = finite ? fp8_pow2(-e) : __uint_as_float(kQuietNaN);
  }
}

// q (R, C) = fp8(x * the scale of each element's block b), flat, for blocks in which every 16-element segment of a
// row lies whole (kRow and kTile cases): 16 elements a thread with 16-byte loads and stores (C a multiple of 16, x
// and q aligned), each segment's scale from its block's amax (cached: a block's segments are neighbours), no shared
// memory or barrier. chunks = R * C / 16 < 2^32, so the indices are 32-bit.
template <class T, __nv_fp8_interpretation_t F>
__global__ void quantize_blocks_flat_kernel(const T* __restrict__ x, int64_t chunks, uint32_t row_chunks,
                                            const float* __restrict__ amax, int max_exp, uint8_t* __restrict__ q,
                                            float* __restrict__ inv_scale, XBlocks b, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < chunks; k += stride) {
    float v[kChunk];
    load16(x + k * kChunk, v);
    const uint32_t i = static_cast<uint32_t>(k) / row_chunks, j = (static_cast<uint32_t>(k) - i * row_chunks) * kChunk;
    bool finite = true;
    const float s = scale_of(__ldg(amax + b.at(i, j)), max_exp, &finite);
#pragma unroll
    for (int e = 0; e < kChunk; ++e) v[e] *= s;
    reinterpret_cast<uint4*>(q)[k] = to_fp8x16<F>(v);
  }
  write_inv_scales(amax, max_exp, inv_scale, count);
}

// Where byte `col` of tile row `row` sits in shared memory: 16-byte groups XOR-swizzled by the row's 16-row band, so
// that the transposed reads, one row of each of the 4 bands at a time, fall on distinct banks.
__device__ __forceinline__ int swizzled(int row, int col) { return col ^ (row / 16 * 16); }

// x (R, C) -> q (R, C) and/or q_t (C, R) (either may be null, not both), one 64 x 64 tile a block, 256 threads. kVec:
// R and C multiples of 16 and x, q, q_t 16-byte aligned, so every 16-element segment of a tile's row or column is
// wholly inside the matrix or wholly outside, and moves in 16-byte loads and stores; otherwise element by element.
// kMode kSingle: the one scale of amax (1), inv_scale (1) written by block 0. Otherwise amax and inv_scale hold
// `count` entries, x's blocks b meeting each tile as kMode says (tile_blocks): the tile's scales go to shared memory
// (one, or one per tile row or column), and the grid writes every inv_scale entry.
template <class T, __nv_fp8_interpretation_t F, bool kVec, TileBlocks kMode>
__global__ void __launch_bounds__(256)
    quantize_transpose_kernel(const T* __restrict__ x, int64_t r, int64_t c, const float* __restrict__ amax,
                              int max_exp, uint8_t* __restrict__ q, uint8_t* __restrict__ q_t,
                              float* __restrict__ inv_scale, XBlocks b, int64_t count) {
  __shared__ alignas(16) uint8_t tile[kTile][kTile];
  const int64_t tiles_c = (c + kTile - 1) / kTile;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) / tiles_c * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) % tiles_c * kTile;
  // Rounding: thread t takes 16 columns of one row of the tile (4 threads a row: 128-byte rows of bf16 loads).
  const int row = threadIdx.x / 4, seg = threadIdx.x % 4 * kChunk;
  const int64_t i = r0 + row, j = c0 + seg;
  const bool inside = i < r && j < c;
  // kVec: the segment is loaded first, so that its loads overlap the scales' (and, with blocks, the wait for them).
  float v[kChunk];
  if constexpr (kVec) {
    if (inside) load16(x + i * c + j, v);
  }
  float s = 1.0f;  // the segment's scale (all but kColumn)
  __shared__ alignas(16) float scales[kMode == TileBlocks::kSingle ? 1 : kTile];  // the tile's (kTile: [0])
  if constexpr (kMode == TileBlocks::kSingle) {
    s = scale_from(amax, max_exp, inv_scale);
  } else {
    if (threadIdx.x < (kMode == TileBlocks::kTile ? 1 : kTile)) {
      const int64_t bi = r0 + (kMode == TileBlocks::kRow ? threadIdx.x : 0);
      const int64_t bj = c0 + (kMode == TileBlocks::kColumn ? threadIdx.x : 0);
      bool finite = true;
      const int64_t at = b.at(r0, c0) + (kMode == TileBlocks::kRow      ? threadIdx.x * b.row_stride
                                         : kMode == TileBlocks::kColumn ? threadIdx.x * b.col_stride
                                                                        : 0);
      scales[threadIdx.x] = bi < r && bj < c ? scale_of(__ldg(amax + at), max_exp, &finite) : 1.0f;
    }
    __syncthreads();
    if constexpr (kMode == TileBlocks::kTile) s = scales[0];
    if constexpr (kMode == TileBlocks::kRow) s = scales[row];
  }
  const bool transpose = q_t != nullptr;
  if constexpr (kVec) {
    if (inside) {
      if constexpr (kMode == TileBlocks::kColumn) {
        float4 sv[kChunk / 4];
#pragma unroll
        for (int k = 0; k < kChunk / 4; ++k) sv[k] = reinterpret_cast<const float4*>(scales + seg)[k];
#pragma unroll
        for (int k = 0; k < kChunk / 4; ++k) {
          v[4 * k] *= sv[k].x;
          v[4 * k + 1] *= sv[k].y;
          v[4 * k + 2] *= sv[k].z;
          v[4 * k + 3] *= sv[k].w;
        }
      } else {
#pragma unroll
        for (int k = 0; k < kChunk; ++k) v[k] *= s;
      }
      const uint4 bytes = to_fp8x16<F>(v);
      if (q) *reinterpret_cast<uint4*>(q + i * c + j) = bytes;
      if (transpose) *reinterpret_cast<uint4*>(&tile[row][swizzled(row, seg)]) = bytes;
    }
  } else {
#pragma unroll 4
    for (int k = 0; k < kChunk; ++k)
      if (i < r && j + k < c) {
        const float sk = kMode == TileBlocks::kColumn ? scales[seg + k] : s;
        const uint8_t byte = to_fp8<F>(to_f32(x[i * c + j + k]) * sk);
        if (q) q[i * c + j + k] = byte;
        if (transpose) tile[row][swizzled(row, seg + k)] = byte;
      }
  }
  if constexpr (kMode != TileBlocks::kSingle) write_inv_scales(amax, max_exp, inv_scale, count);
  if (!transpose) return;
  __syncthreads();
  // Transposed writes: warp w takes tile columns [8 w, 8 w + 8), 4 lanes a column: lane l writes the 16 bytes of
  // tile rows [16 (l % 4), +16) into q_t's row c0 + 8 w + l / 4, so a warp stores 8 rows of 64 contiguous bytes.
  const int lane = threadIdx.x % 32, band = lane % 4;
  const int col = threadIdx.x / 32 * 8 + lane / 4, row0 = band * kChunk;
  const int64_t jt = c0 + col, it = r0 + row0;
  if (jt >= c) return;
  const int at = col ^ (band * 16);  // swizzled(row0 + k, col) for every k < 16
  if constexpr (kVec) {
    if (it < r) {
      uint32_t w[4];
#pragma unroll
      for (int g = 0; g < 4; ++g)
        w[g] = static_cast<uint32_t>(tile[row0 + 4 * g][at]) | static_cast<uint32_t>(tile[row0 + 4 * g + 1][at]) << 8 |
               static_cast<uint32_t>(tile[row0 + 4 * g + 2][at]) << 16 |
               static_cast<uint32_t>(tile[row0 + 4 * g + 3][at]) << 24;
      *reinterpret_cast<uint4*>(q_t + jt * r + it) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  } else {
#pragma unroll 4
    for (int k = 0; k < kChunk; ++k)
      if (it + k < r) q_t[jt * r + it + k] = tile[row0 + k][at];
  }
}

// Queues the rounding of x into q and/or q_t. One scale (mode kSingle): q alone flat, with q_t by tiles. Several
// (amax and inv_scale of `count` entries): q alone flat where 16-byte segments of rows allow (kRow, kTile), else by
// tiles, x's blocks b meeting them as `mode` says.
template <class T, __nv_fp8_interpretation_t F>
void queue_quantize(device::CudaDevice& dev, const Tensor& x, const Tensor& amax, const Tensor& q, const Tensor& q_t,
                    const Tensor& inv_scale, int max_exp, TileBlocks mode, const XBlocks& b, int64_t count) {
  const cudaStream_t stream = dev.compute_stream();
  const T* in = x.data<T>();
  auto* out = q.defined() ? static_cast<uint8_t*>(q.raw()) : nullptr;
  auto* out_t = q_t.defined() ? static_cast<uint8_t*>(q_t.raw()) : nullptr;
  const int64_t n = x.numel();
  if (mode == TileBlocks::kSingle) {
    if (!q_t.defined()) {
      const bool packed = aligned16(in) && aligned16(out);
      const unsigned blocks = grid_for(dev, packed ? n / kChunk + n % kChunk : n);
      quantize_flat_kernel<T, F>
          <<<blocks, kThreads, 0, stream>>>(in, n, packed, amax.f32(), max_exp, out, inv_scale.f32());
      TANDEM_CUDA_CHECK_LAUNCH();
      return;
    }
    if (n == 0) {  // no tile: the flat kernel writes inv_scale alone
      quantize_flat_kernel<T, F><<<1, kThreads, 0, stream>>>(in, 0, false, amax.f32(), max_exp, out, inv_scale.f32());
      TANDEM_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  const int64_t r = rows_of(x), c = cols_of(x);
  if (!q_t.defined() && (mode == TileBlocks::kRow || mode == TileBlocks::kTile) && n > 0 && c % kChunk == 0 &&
      n / kChunk <= UINT32_MAX && aligned16(in) && aligned16(out)) {
    // q alone, each row's segments in one block: flat, as with one scale.
    const unsigned blocks = grid_for(dev, n / kChunk);
    quantize_blocks_flat_kernel<T, F><<<blocks, kThreads, 0, stream>>>(
        in, n / kChunk, static_cast<uint32_t>(c / kChunk), amax.f32(), max_exp, out, inv_scale.f32(), b, count);
    TANDEM_CUDA_CHECK_LAUNCH();
    return;
  }
  // With several scales, at least one tile: an empty x still has its inverse scales written.
  const int64_t tiles = std::max<int64_t>(((r + kTile - 1) / kTile) * ((c + kTile - 1) / kTile), 1);
  TANDEM_CHECK(tiles <= INT32_MAX, "fp8_quantize: x ", shape_str(x.shape()), " has too many tiles for one grid");
  const bool vec =
      r % 16 == 0 && c % 16 == 0 && aligned16(in) && (!out_t || aligned16(out_t)) && (!out || aligned16(out));
  with_tile_blocks(mode, [&](auto m) {
    constexpr TileBlocks kMode = decltype(m)::value;
    const auto launch = [&](auto kernel) {
      kernel<<<static_cast<unsigned>(tiles), 256, 0, stream>>>(in, r, c, amax.f32(), max_exp, out, out_t,
                                                               inv_scale.f32(), b, count);
      TANDEM_CUDA_CHECK_LAUNCH();
    };
    if (vec) {
      launch(quantize_transpose_kernel<T, F, true, kMode>);
    } else {
      launch(quantize_transpose_kernel<T, F, false, kMode>);
    }
  });
}

}  // namespace

void amax(const Tensor& x, const Tensor& amax, Fp8Blocks blocks, bool transposed) {
  const char* op = "amax";
  check_float(op, "x", x);
  check_dtype(op, "amax", amax, DType::F32);
  const int64_t r = rows_of(x), c = cols_of(x);
  const Fp8ScaleGrid g = transposed ? fp8_scale_grid(c, r, blocks) : fp8_scale_grid(r, c, blocks);
  TANDEM_CHECK(amax.numel() == g.count, op, ": amax ", shape_str(amax.shape()), " must hold ", g.count,
               " element(s), one per block");
  device::CudaDevice& dev = cuda_device(amax);
  const cudaStream_t stream = dev.compute_stream();
  // +0: the maximum of nothing, and the padding's value.
  TANDEM_CUDA_CHECK(cudaMemsetAsync(amax.raw(), 0, static_cast<size_t>(g.count) * sizeof(float), stream));
  const int64_t n = x.numel();
  if (n == 0) return;
  if (g.single()) {
    dispatch_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      const bool packed = aligned16(x.raw());
      const int64_t items = packed ? (n / kPack<T> + kAmaxUnroll - 1) / kAmaxUnroll + n % kPack<T> : n;
      amax_kernel<T>
          <<<grid_for(dev, items), kThreads, 0, stream>>>(x.data<T>(), n, packed, static_cast<uint32_t*>(amax.raw()));
      TANDEM_CUDA_CHECK_LAUNCH();
    });
    return;
  }
  const XBlocks b = x_blocks(g, transposed);
  const TileBlocks mode = tile_blocks(op, x, blocks, transposed, b);
  const int64_t tiles_r = (r + kTile - 1) / kTile, tiles_c = (c + kTile - 1) / kTile;
  // Tiles a block takes along the reduced dimension (fewer atomics, more loads a thread): up to 8 within one block of
  // x, while the grid keeps 2048 blocks (two waves of 8 on 132 SMs).
  int span = 1;
  if (mode == TileBlocks::kRow || mode == TileBlocks::kColumn) {
    const bool row = mode == TileBlocks::kRow;
    const int64_t extent = row ? b.cols : b.rows, whole = row ? c : r, along = row ? tiles_c : tiles_r;
    for (const int s : {8, 4, 2})
      if ((extent >= whole || extent % (kTile * s) == 0) && (along + s - 1) / s * (row ? tiles_r : tiles_c) >= 2048) {
        span = s;
        break;
      }
  }
  const int64_t grid = mode == TileBlocks::kRow      ? tiles_r * ((tiles_c + span - 1) / span)
                       : mode == TileBlocks::kColumn ? (tiles_r + span - 1) / span * tiles_c
                                                     : tiles_r * tiles_c;
  TANDEM_CHECK(grid <= INT32_MAX, op, ": x ", shape_str(x.shape()), " has too many tiles for one grid");
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = r % 16 == 0 && c % 16 == 0 && aligned16(x.raw());
    with_tile_blocks(mode, [&](auto m) {
      constexpr TileBlocks kMode = decltype(m)::value;
      if constexpr (kMode != TileBlocks::kSingle) {
        const auto launch = [&](auto kernel) {
          kernel<<<static_cast<unsigned>(grid), 256, 0, stream>>>(x.data<T>(), r, c, b, span,
                                                                  static_cast<uint32_t*>(amax.raw()));
          TANDEM_CUDA_CHECK_LAUNCH();
        };
        if (vec) {
          launch(amax_tiles_kernel<T, true, kMode>);
        } else {
          launch(amax_tiles_kernel<T, false, kMode>);
        }
      }
    });
  });
}

void fp8_quantize(const Tensor& x, const Tensor& amax, const Tensor& q, const Tensor& q_t, const Tensor& inv_scale,
                  Fp8Blocks blocks) {
  const char* op = "fp8_quantize";
  check_float(op, "x", x);
  check_dtype(op, "amax", amax, DType::F32);
  check_dtype(op, "inv_scale", inv_scale, DType::F32);
  TANDEM_CHECK(q.defined() || q_t.defined(), op, ": neither q nor q_t given");
  const DType format = q.defined() ? q.dtype() : q_t.dtype();
  TANDEM_CHECK(format == DType::E4M3 || format == DType::E5M2, op, ": q holds ", dtype_name(format),
               ", not e4m3 or e5m2");
  TANDEM_CHECK(!q.defined() || !q_t.defined() || q.dtype() == q_t.dtype(), op, ": q and q_t differ in format");
  // Every block reads amax and some write inv_scale: one must not be the other.
  TANDEM_CHECK(amax.raw() != inv_scale.raw(), op, ": inv_scale is amax; give it its own memory");
  const int64_t r = rows_of(x), c = cols_of(x);
  const Fp8ScaleGrid g = q.defined() ? fp8_scale_grid(r, c, blocks) : fp8_scale_grid(c, r, blocks);
  TANDEM_CHECK(g.single() || !q.defined() || !q_t.defined(), op, ": blocks ", blocks.rows, " x ", blocks.cols,
               " give several scales; q and q_t take one call each");
  TANDEM_CHECK(amax.numel() == g.count && inv_scale.numel() == g.count, op, ": amax ", shape_str(amax.shape()),
               " and inv_scale ", shape_str(inv_scale.shape()), " must hold ", g.count, " element(s), one per block");
  TileBlocks mode = TileBlocks::kSingle;
  XBlocks b;
  if (!g.single()) {
    b = x_blocks(g, !q.defined());
    mode = tile_blocks(op, x, blocks, !q.defined(), b);
  }
  device::CudaDevice& dev = cuda_device(inv_scale);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (format == DType::E4M3) {
      queue_quantize<T, __NV_E4M3>(dev, x, amax, q, q_t, inv_scale, kE4M3MaxExp, mode, b, g.count);
    } else {
      queue_quantize<T, __NV_E5M2>(dev, x, amax, q, q_t, inv_scale, kE5M2MaxExp, mode, b, g.count);
    }
  });
}

}  // namespace tandem::ops::cuda
