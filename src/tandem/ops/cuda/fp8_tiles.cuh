// CUDA FP8 (ops.h, "FP8"): what amax (fp8_amax.cu) and fp8_quantize (fp8_quantize.cu) share: the tiles, the blocks of
// several scales seen from x, the loads. Both run on the compute stream, no host sync. fp8_matmul is in gemm.cc.
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
#pragma once

#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/fp8_scale.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda::fp8_detail {

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

inline XBlocks x_blocks(const Fp8ScaleGrid& g, bool transposed) {
  const auto narrow = [](int64_t e) { return static_cast<uint32_t>(e); };  // <= x's extent (tile_blocks checks it)
  return transposed ? XBlocks{narrow(g.block_cols), narrow(g.block_rows), g.col_stride, g.row_stride}
                    : XBlocks{narrow(g.block_rows), narrow(g.block_cols), g.row_stride, g.col_stride};
}

// The tile kernels' case for blocks b of x (R, C), or a refusal naming them: along each dimension of x a block must
// be one element, a multiple of the tile or the whole extent (not one element along both), so that no tile crosses
// a block boundary except between its rows or between its columns.
inline TileBlocks tile_blocks(const char* op, const Tensor& x, Fp8Blocks blocks, bool transposed, const XBlocks& b) {
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

}  // namespace tandem::ops::cuda::fp8_detail
