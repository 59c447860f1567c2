// CUDA FP8: amax (ops.h, "FP8"). How the kernels work, and what they share with the other FP8 kernels, is in
// fp8_tiles.cuh.
#include "tandem/ops/cuda/fp8_tiles.cuh"

namespace tandem::ops::cuda {

using namespace fp8_detail;

namespace {

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

}  // namespace tandem::ops::cuda
