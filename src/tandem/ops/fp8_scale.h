// The FP8 scale (ops.h, "FP8") as one function of an amax, and the grid of blocks that share one scale with the layout
// of their scales, for the CPU kernels and the CUDA ones alike: integer work on the fp32 bits, so both compute the
// same power of two, and one index for a block's scale everywhere.
#pragma once

#include <cstdint>
#include <cstring>

#include "tandem/core/host_device.h"

namespace tandem::ops {

// The exponent e of the scale 2^e for a tensor of largest magnitude `amax` in a format whose largest finite value is
// 1.75 * 2^max_exp (e4m3: 448 = 1.75 * 2^8, e5m2: 57344 = 1.75 * 2^15): the largest e with amax * 2^e <= that value,
// clamped to [-126, 126]; 0 when amax is 0 or not finite. `finite` is set false for a non-finite amax.
TANDEM_HOST_DEVICE inline int fp8_scale_exponent(float amax, int max_exp, bool* finite) {
  uint32_t u;
  memcpy(&u, &amax, 4);
  u &= 0x7fffffffu;
  *finite = u < 0x7f800000u;
  if (!*finite || u == 0) return 0;
  // amax = m * 2^E with 1 <= m < 2 (a subnormal amax is below 2^-126, whose e clamps to 126 anyway).
  const int E = u < 0x00800000u ? -127 : static_cast<int>(u >> 23) - 127;
  const bool over = (u & 0x7fffffu) > 0x600000u;  // m > 1.75
  int e = max_exp - E - (over ? 1 : 0);
  if (e > 126) e = 126;
  if (e < -126) e = -126;
  return e;
}

// 2^e as a float, for |e| <= 126.
TANDEM_HOST_DEVICE inline float fp8_pow2(int e) {
  const uint32_t u = static_cast<uint32_t>(e + 127) << 23;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

inline constexpr int kE4M3MaxExp = 8, kE5M2MaxExp = 15;

// The blocks of an FP8 operand (R, C) that share one scale: `rows` x `cols` elements, 0 (or more than the extent)
// meaning the whole extent, the last block along each dimension partial. {} is one scale for the tensor
// (tensorwise), {1, 0} one per row (rowwise), {1, 128} and {128, 128} DeepSeek-V3's tiles (blockwise).
struct Fp8Blocks {
  int64_t rows = 0, cols = 0;
};

// Where the scales of an operand's blocks live: block (i, j) of the (rows, cols) grid at i * row_stride + j *
// col_stride of a tensor of `count` f32. The layout is the one Hopper's scaled products read (cuBLASLt's scale modes)
// for an operand whose C is the product's K: one value for one block; 1-row blocks column-block-major (i fastest:
// one value per row when a row is one block); taller blocks row-major, the block-columns padded to a multiple of 4
// (the padding's values are never read).
struct Fp8ScaleGrid {
  int64_t block_rows = 1, block_cols = 1;  // resolved extents of a whole block
  int64_t rows = 1, cols = 1;              // blocks along R and C
  int64_t row_stride = 0, col_stride = 0;
  int64_t count = 1;
  TANDEM_HOST_DEVICE bool single() const { return rows == 1 && cols == 1; }
  TANDEM_HOST_DEVICE int64_t at(int64_t i, int64_t j) const { return i * row_stride + j * col_stride; }
};

// A block's extent along a dimension of `extent` elements when `want` are asked for.
TANDEM_HOST_DEVICE inline int64_t fp8_block_extent(int64_t want, int64_t extent) {
  const int64_t e = extent > 0 ? extent : 1;
  return want <= 0 || want > e ? e : want;
}

TANDEM_HOST_DEVICE inline Fp8ScaleGrid fp8_scale_grid(int64_t r, int64_t c, Fp8Blocks blocks) {
  Fp8ScaleGrid g;
  g.block_rows = fp8_block_extent(blocks.rows, r);
  g.block_cols = fp8_block_extent(blocks.cols, c);
  g.rows = r > 0 ? (r + g.block_rows - 1) / g.block_rows : 1;
  g.cols = c > 0 ? (c + g.block_cols - 1) / g.block_cols : 1;
  if (g.single()) return g;
  if (g.block_rows == 1) {
    g.row_stride = 1;
    g.col_stride = g.rows;
    g.count = g.rows * g.cols;
  } else {
    const int64_t padded = (g.cols + 3) / 4 * 4;
    g.row_stride = padded;
    g.col_stride = 1;
    g.count = g.rows * padded;
  }
  return g;
}

}  // namespace tandem::ops
