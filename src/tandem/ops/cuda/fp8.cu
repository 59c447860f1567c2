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
#include <cuda_fp8.h>

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

// ---- amax ----

struct MaxBitsOp {
  __device__ __forceinline__ uint32_t operator()(uint32_t a, uint32_t b) const { return a > b ? a : b; }
};

__device__ __forceinline__ uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

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
  if (threadIdx.x == 0 && best != 0) atomicMax(out, best > kInfBits ? kQuietNaN : best);
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

// v = 16 elements from 16-byte aligned p, times s.
template <class T>
__device__ __forceinline__ void load_scaled(const T* p, float s, float (&v)[kChunk]) {
  constexpr int P = kPack<T>;
  const auto* packs = reinterpret_cast<const Pack<T>*>(p);
  Pack<T> raw[kChunk / P];
#pragma unroll
  for (int h = 0; h < kChunk / P; ++h) raw[h] = packs[h];
#pragma unroll
  for (int h = 0; h < kChunk / P; ++h)
#pragma unroll
    for (int k = 0; k < P; ++k) v[h * P + k] = to_f32(raw[h].v[k]) * s;
}

// The scale 2^e of the format whose largest finite value is 1.75 * 2^max_exp, from amax; block 0's thread 0 writes
// inv_scale.
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

// Where byte `col` of tile row `row` sits in shared memory: 16-byte groups XOR-swizzled by the row's 16-row band, so
// that the transposed reads, one row of each of the 4 bands at a time, fall on distinct banks.
__device__ __forceinline__ int swizzled(int row, int col) { return col ^ (row / 16 * 16); }

// x (R, C) -> q (R, C) (may be null) and q_t (C, R), one 64 x 64 tile a block, 256 threads. kVec: R and C multiples
// of 16 and x, q, q_t 16-byte aligned, so every 16-element segment of a tile's row or column is wholly inside the
// matrix or wholly outside, and moves in 16-byte loads and stores; otherwise element by element.
template <class T, __nv_fp8_interpretation_t F, bool kVec>
__global__ void __launch_bounds__(256)
    quantize_transpose_kernel(const T* __restrict__ x, int64_t r, int64_t c, const float* __restrict__ amax,
                              int max_exp, uint8_t* __restrict__ q, uint8_t* __restrict__ q_t,
                              float* __restrict__ inv_scale) {
  __shared__ alignas(16) uint8_t tile[kTile][kTile];
  const float s = scale_from(amax, max_exp, inv_scale);
  const int64_t tiles_c = (c + kTile - 1) / kTile;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) / tiles_c * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) % tiles_c * kTile;
  {
    // Rounding: thread t takes 16 columns of one row of the tile (4 threads a row: 128-byte rows of bf16 loads).
    const int row = threadIdx.x / 4, seg = threadIdx.x % 4 * kChunk;
    const int64_t i = r0 + row, j = c0 + seg;
    if constexpr (kVec) {
      if (i < r && j < c) {
        float v[kChunk];
        load_scaled(x + i * c + j, s, v);
        const uint4 bytes = to_fp8x16<F>(v);
        if (q) *reinterpret_cast<uint4*>(q + i * c + j) = bytes;
        *reinterpret_cast<uint4*>(&tile[row][swizzled(row, seg)]) = bytes;
      }
    } else {
#pragma unroll 4
      for (int k = 0; k < kChunk; ++k)
        if (i < r && j + k < c) {
          const uint8_t b = to_fp8<F>(to_f32(x[i * c + j + k]) * s);
          if (q) q[i * c + j + k] = b;
          tile[row][swizzled(row, seg + k)] = b;
        }
    }
  }
  __syncthreads();
  // Transposed writes: warp w takes tile columns [8 w, 8 w + 8), 4 lanes a column: lane l writes the 16 bytes of
  // tile rows [16 (l % 4), +16) into q_t's row c0 + 8 w + l / 4, so a warp stores 8 rows of 64 contiguous bytes.
  const int lane = threadIdx.x % 32, band = lane % 4;
  const int col = threadIdx.x / 32 * 8 + lane / 4, row0 = band * kChunk;
  const int64_t j = c0 + col, i = r0 + row0;
  if (j >= c) return;
  const int at = col ^ (band * 16);  // swizzled(row0 + k, col) for every k < 16
  if constexpr (kVec) {
    if (i < r) {
      uint32_t w[4];
#pragma unroll
      for (int g = 0; g < 4; ++g)
        w[g] = static_cast<uint32_t>(tile[row0 + 4 * g][at]) | static_cast<uint32_t>(tile[row0 + 4 * g + 1][at]) << 8 |
               static_cast<uint32_t>(tile[row0 + 4 * g + 2][at]) << 16 |
               static_cast<uint32_t>(tile[row0 + 4 * g + 3][at]) << 24;
      *reinterpret_cast<uint4*>(q_t + j * r + i) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  } else {
#pragma unroll 4
    for (int k = 0; k < kChunk; ++k)
      if (i + k < r) q_t[j * r + i + k] = tile[row0 + k][at];
  }
}

template <class T, __nv_fp8_interpretation_t F>
void queue_quantize(device::CudaDevice& dev, const Tensor& x, const Tensor& amax, const Tensor& q, const Tensor& q_t,
                    const Tensor& inv_scale, int max_exp) {
  const cudaStream_t stream = dev.compute_stream();
  const T* in = x.data<T>();
  auto* out = q.defined() ? static_cast<uint8_t*>(q.raw()) : nullptr;
  const int64_t n = x.numel();
  if (!q_t.defined()) {
    const bool packed = aligned16(in) && aligned16(out);
    const unsigned blocks = grid_for(dev, packed ? n / kChunk + n % kChunk : n);
    quantize_flat_kernel<T, F>
        <<<blocks, kThreads, 0, stream>>>(in, n, packed, amax.f32(), max_exp, out, inv_scale.f32());
    TANDEM_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t r = rows_of(x), c = cols_of(x);
  auto* out_t = static_cast<uint8_t*>(q_t.raw());
  if (n == 0) {  // no tile: the flat kernel writes inv_scale alone
    quantize_flat_kernel<T, F><<<1, kThreads, 0, stream>>>(in, 0, false, amax.f32(), max_exp, out, inv_scale.f32());
    TANDEM_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t tiles = ((r + kTile - 1) / kTile) * ((c + kTile - 1) / kTile);
  TANDEM_CHECK(tiles <= INT32_MAX, "fp8_quantize: x ", shape_str(x.shape()), " has too many tiles for one grid");
  const bool vec = r % 16 == 0 && c % 16 == 0 && aligned16(in) && aligned16(out_t) && (!out || aligned16(out));
  const auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(tiles), 256, 0, stream>>>(in, r, c, amax.f32(), max_exp, out, out_t,
                                                             inv_scale.f32());
    TANDEM_CUDA_CHECK_LAUNCH();
  };
  if (vec) {
    launch(quantize_transpose_kernel<T, F, true>);
  } else {
    launch(quantize_transpose_kernel<T, F, false>);
  }
}

}  // namespace

void amax(const Tensor& x, const Tensor& amax) {
  check_float("amax", "x", x);
  check_dtype("amax", "amax", amax, DType::F32);
  TANDEM_CHECK(amax.numel() == 1, "amax: amax ", shape_str(amax.shape()), " must hold one element");
  device::CudaDevice& dev = cuda_device(amax);
  const cudaStream_t stream = dev.compute_stream();
  TANDEM_CUDA_CHECK(cudaMemsetAsync(amax.raw(), 0, sizeof(float), stream));  // +0: the maximum of nothing
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "amax", [&](auto tag) {
    using T = decltype(tag);
    const bool packed = aligned16(x.raw());
    const int64_t items = packed ? (n / kPack<T> + kAmaxUnroll - 1) / kAmaxUnroll + n % kPack<T> : n;
    amax_kernel<T>
        <<<grid_for(dev, items), kThreads, 0, stream>>>(x.data<T>(), n, packed, static_cast<uint32_t*>(amax.raw()));
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void fp8_quantize(const Tensor& x, const Tensor& amax, const Tensor& q, const Tensor& q_t, const Tensor& inv_scale) {
  const char* op = "fp8_quantize";
  check_float(op, "x", x);
  check_dtype(op, "amax", amax, DType::F32);
  check_dtype(op, "inv_scale", inv_scale, DType::F32);
  TANDEM_CHECK(q.defined() || q_t.defined(), op, ": neither q nor q_t given");
  const DType format = q.defined() ? q.dtype() : q_t.dtype();
  TANDEM_CHECK(format == DType::E4M3 || format == DType::E5M2, op, ": q holds ", dtype_name(format),
               ", not e4m3 or e5m2");
  TANDEM_CHECK(!q.defined() || !q_t.defined() || q.dtype() == q_t.dtype(), op, ": q and q_t differ in format");
  // Every block reads amax and block 0 writes inv_scale: one must not be the other.
  TANDEM_CHECK(amax.raw() != inv_scale.raw(), op, ": inv_scale is amax; give it its own memory");
  device::CudaDevice& dev = cuda_device(inv_scale);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (format == DType::E4M3) {
      queue_quantize<T, __NV_E4M3>(dev, x, amax, q, q_t, inv_scale, kE4M3MaxExp);
    } else {
      queue_quantize<T, __NV_E5M2>(dev, x, amax, q, q_t, inv_scale, kE5M2MaxExp);
    }
  });
}

}  // namespace tandem::ops::cuda
