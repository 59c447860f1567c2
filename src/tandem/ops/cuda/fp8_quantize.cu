// CUDA FP8: fp8_quantize (ops.h, "FP8"). How the kernels work, and what they share with the other FP8 kernels, is in
// fp8_tiles.cuh.
#include "tandem/ops/cuda/fp8_tiles.cuh"

namespace tandem::ops::cuda {

using namespace fp8_detail;

namespace {

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
