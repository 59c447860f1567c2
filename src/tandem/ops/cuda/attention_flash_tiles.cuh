// What the flash attention kernels share (attention_flash_forward.cu, attention_flash_backward.cu): the warp-level
// tensor-core product mma.sync m16n8k16 (16-bit inputs, fp32 accumulators) and its operand loads from shared memory
// (ldmatrix), asynchronous tile copies (cp.async, zero-filled past T so ragged tiles need no other care), the
// layout of a head inside the fused rows, and the document bounds.
//
// Fragment layouts of m16n8k16 (lane = 4 g + t, g = lane / 4, t = lane % 4):
//   A (16 x 16, row-major)  a0 (g, 2t..2t+1)   a1 (g+8, 2t..)   a2 (g, 2t+8..)   a3 (g+8, 2t+8..)
//   B (16 x 8, k x n)       b0 (k 2t..2t+1, n g)                 b1 (k 2t+8..2t+9, n g)
//   C (16 x 8, f32)         c0, c1 (g, 2t..2t+1)                 c2, c3 (g+8, 2t..2t+1)
// So an accumulator tile of 16 rows x 16 columns (two C blocks) is, rounded to 16 bits, the A operand of the next
// product over those 16 columns: no trip through shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "tandem/ops/cuda/attention_flash.h"

namespace tandem::ops::cuda::flash {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Every tile row in shared memory is D + 8 elements long: the 16 extra bytes put the eight rows one ldmatrix reads
// on eight different groups of banks (no conflicts), and keep rows on 16-byte boundaries for cp.async.
constexpr int kPad = 8;
constexpr float kLog2e = 1.4426950408889634f;

// The element offsets of one batch element's heads in the fused layouts.
struct Heads {
  int64_t t;
  int h, kv, d;
  __host__ __device__ int64_t width() const { return static_cast<int64_t>(h + 2 * kv) * d; }  // W
};

// ---- 16-bit packing ----
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half22float2(*reinterpret_cast<__half2*>(&v));
  } else {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
  }
}

// ---- tensor-core product: c (16 x 8 f32) += a (16 x 16) b (16 x 8) ----
template <class T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// ---- ldmatrix: four 8 x 8 16-bit matrices, lane l giving the address of row l % 8 of matrix l / 8 ----
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
__device__ __forceinline__ void ldsm4_t(uint32_t (&r)[4], const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}

// A operand: rows r0..r0+15, columns k0..k0+15 of a row-major tile with row stride `ld` elements.
template <class T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int ld, int r0, int k0) {
  const int lane = threadIdx.x & 31;
  ldsm4(a, tile + (r0 + (lane & 15)) * ld + k0 + (lane >> 4) * 8);
}

// B operands of two n-blocks (n0, n0 + 8) for k0..k0+15 from a tile stored n-major (row n holds the k values: K for
// q k^T): b[0], b[1] for block n0, b[2], b[3] for block n0 + 8.
template <class T>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const T* tile, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31;
  ldsm4(b, tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * ld + k0 + ((lane >> 3) & 1) * 8);
}

// The same from a tile stored k-major (row k holds the n values: V for p v), transposed on the way.
template <class T>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const T* tile, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31;
  ldsm4_t(b, tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}

// The A operand over columns 16 kk .. 16 kk + 15 of an accumulator tile c[n-block][4], rounded to 16 bits.
template <class T, int N>
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&c)[N][4], int kk) {
  a[0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// ---- asynchronous copies ----
// 16 bytes global -> shared; zeros when !valid (src is then not read, but must still be a mapped address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n) : "memory");
}
// 4 bytes global -> shared (a row statistic), zero when !valid.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Rows row0 .. row0 + R - 1 (D columns each) of a head whose row 0 is at src, rows ld elements apart, into a shared
// tile with rows D + kPad apart; rows at or past t read as zeros.
template <int R, int D, class T>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t ld, int64_t row0, int64_t t) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  static_assert(R * kChunks % kThreads == 0, "every thread copies the same number of pieces");
#pragma unroll
  for (int it = 0; it < R * kChunks / kThreads; ++it) {
    const int c = it * kThreads + static_cast<int>(threadIdx.x);
    const int r = c / kChunks, k = (c % kChunks) * 8;
    const int64_t row = row0 + r;
    const bool ok = row < t;
    cp_async16(dst + r * (D + kPad) + k, src + (ok ? row : 0) * ld + k, ok);
  }
}

// ---- documents (B, T) i32, non-decreasing: the run of positions holding one id ----
// The first position holding docs[i]'s id (start_i).
__device__ __forceinline__ int64_t document_start(const int32_t* docs, int64_t i) {
  const int32_t id = docs[i];
  int64_t lo = 0, hi = i;  // the answer lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (docs[mid] < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}
// One past the last position holding docs[j]'s id.
__device__ __forceinline__ int64_t document_end(const int32_t* docs, int64_t j, int64_t t) {
  const int32_t id = docs[j];
  int64_t lo = j + 1, hi = t;  // the answer lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (docs[mid] > id)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// Reductions over the four lanes that hold one accumulator row (lanes 4g .. 4g+3), in a fixed order.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Opts a kernel in to `bytes` of dynamic shared memory (above the default 48 KiB).
template <class Kernel>
cudaError_t allow_shared(Kernel kernel, int bytes) {
  return bytes <= 48 * 1024 ? cudaSuccess
                            : cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

}  // namespace tandem::ops::cuda::flash
