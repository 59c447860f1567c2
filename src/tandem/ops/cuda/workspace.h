// Sizes the CUDA kernels' scratch is made of, shared by the kernels and by scratch.cc (which every build compiles, so
// the planner can plan GPUs without the CUDA toolkit). Plain C++: no CUDA header.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tandem::ops::cuda {

// cuBLASLt's workspace: one per device, allocated with its first matmul and kept.
inline constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;

// sum_squares (reduce.cu): per device, kept from its first call, the partial sums of at most kSumSquaresBlocks
// blocks, the total and the running sum of sum_squares_total, in double.
inline constexpr int64_t kSumSquaresBlocks = 1024;
inline constexpr int64_t kSumSquaresScratchBytes = (kSumSquaresBlocks + 2) * 8;

// ---- column sums (column_sum.cuh): bias gradients, the LayerNorm parameter gradients ----

// Elements of one 16-byte pack of an element of `elem_bytes` bytes: a thread's columns in the packed kernels.
inline int64_t pack_of(int64_t elem_bytes) { return 16 / elem_bytes; }

// Rows one thread of the partial-sum kernel loads before adding them (16 bytes each: 128 bytes in flight).
inline constexpr int64_t kColumnSumUnroll = 8;
// Column threads x slices the partial sums aim for: with 128 bytes in flight per thread, 49,152 threads keep 6 MB in
// flight, above an H200's bandwidth-latency product (4.8 TB/s x ~1 us).
inline constexpr int64_t kColumnSumThreads = 49152;

// Rows per slice of a column sum over `rows` rows with `lanes` column threads (one per pack of columns): enough
// slices to reach kColumnSumThreads threads, each slice a whole number of unrolled groups. Depends on the shape only.
inline int64_t column_sum_rows_per_slice(int64_t rows, int64_t lanes) {
  const int64_t want = std::max<int64_t>(1, (kColumnSumThreads + lanes - 1) / std::max<int64_t>(lanes, 1));
  const int64_t per = (rows + want - 1) / want;
  return std::max<int64_t>(kColumnSumUnroll, (per + kColumnSumUnroll - 1) / kColumnSumUnroll * kColumnSumUnroll);
}
inline int64_t column_sum_slices(int64_t rows, int64_t lanes) {
  const int64_t per = column_sum_rows_per_slice(rows, lanes);
  return (rows + per - 1) / per;
}
// The partial sums of K column sums over (rows, cols) of an element of `elem_bytes` bytes: (K, slices, cols) f32.
inline int64_t column_sum_scratch_bytes(int64_t k, int64_t rows, int64_t cols, int64_t elem_bytes) {
  if (rows == 0 || cols == 0) return 0;
  const int64_t pack = pack_of(elem_bytes);
  return k * column_sum_slices(rows, (cols + pack - 1) / pack) * cols * 4;
}

// ---- LayerNorm backward in one pass (layernorm.cu) ----

// Blocks of the packed backward: each takes a contiguous share of the rows and writes one row of partial dgamma and
// dbeta sums. 256 blocks fill an H200 (2 per SM) while the partial sums stay ~8% of the pass's bytes at C = 1600.
inline constexpr int64_t kLayerNormBlocks = 256;
// Packs one thread holds per row in the packed backward (256 threads a row): 1, 2 or 4, so C up to 1024 packs
// (8192 bf16 / f16 values, 4096 f32); 0 where C takes the general kernels (not a whole number of packs, or wider).
inline int layernorm_backward_packs_per_thread(int64_t cols, int64_t elem_bytes) {
  const int64_t pack = pack_of(elem_bytes);
  if (cols == 0 || cols % pack != 0) return 0;
  const int64_t packs = cols / pack;
  return packs <= 256 ? 1 : packs <= 512 ? 2 : packs <= 1024 ? 4 : 0;
}
// What a block's row count of the packed backward is a multiple of: 4 / packs per thread. The kernel's row groups
// (norm_backward.cuh) are this many rows or divide it.
constexpr int layernorm_backward_row_multiple(int packs_per_thread) { return 4 / packs_per_thread; }
// Rows a block of the packed backward takes: rows / kLayerNormBlocks rounded up to that multiple. The block count
// fixes the order of the parameter gradients' sums, and so their bits.
inline int64_t layernorm_backward_rows_per_block(int64_t rows, int packs_per_thread) {
  const int64_t at_once = layernorm_backward_row_multiple(packs_per_thread);
  const int64_t per = (rows + kLayerNormBlocks - 1) / kLayerNormBlocks;
  return std::max<int64_t>(at_once, (per + at_once - 1) / at_once * at_once);
}
// Scratch of layernorm_backward on (rows, cols) of an element of `elem_bytes` bytes: the partial sums of dgamma
// and dbeta, (2, blocks, C) f32 in the packed pass, (2, slices, C) in the general one. Assumes 16-byte aligned
// tensors (a view off the 16-byte grid takes the general kernels, whose scratch differs).
inline int64_t layernorm_backward_scratch_bytes(int64_t rows, int64_t cols, int64_t elem_bytes) {
  if (rows == 0 || cols == 0) return 0;
  const int p = layernorm_backward_packs_per_thread(cols, elem_bytes);
  if (p == 0) return column_sum_scratch_bytes(2, rows, cols, elem_bytes);
  const int64_t per = layernorm_backward_rows_per_block(rows, p);
  return 2 * ((rows + per - 1) / per) * cols * 4;
}

}  // namespace tandem::ops::cuda
