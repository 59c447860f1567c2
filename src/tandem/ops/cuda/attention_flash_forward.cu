// The flash attention forward (attention_flash.h): one block of four warps per (64-row query tile, batch element,
// query head); each warp owns 16 query rows and walks the key/value tiles of 64 positions from the first one its
// tile's documents reach to the diagonal, keeping its rows' running maximum m and sum l of exp (the online softmax)
// and its output rows in fp32 registers. Key and value tiles are double-buffered in shared memory by cp.async, so the
// next tile's copy overlaps this tile's products. Memory: none beyond y and lse.
#include <cmath>

#include "tandem/ops/cuda/attention_flash_tiles.cuh"

namespace tandem::ops::cuda {
namespace flash {
namespace {

constexpr int kRows = 64;  // query rows per block, 16 per warp
constexpr int kCols = 64;  // key positions per tile (equal to kRows: query tile qt's diagonal is key tile qt)

template <int D>
constexpr int forward_shared_bytes() {
  return (kRows + 4 * kCols) * (D + kPad) * 2;  // q, then two buffers each of k and v, 16-bit
}

// qkv (B, T, W), y (B, T, H*D), lse (B, H, T), documents (B, T) or null. scale_log2 = log2(e) / sqrt(D): scores
// are kept in base 2 so that exp is one exp2.
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2)
    forward_kernel(const T* __restrict__ qkv, T* __restrict__ y, float* __restrict__ lse,
                   const int32_t* __restrict__ docs, int64_t t, int h, int kv, float scale_log2) {
  constexpr int S = D + kPad;     // shared row stride
  constexpr int kNB = kCols / 8;  // n-blocks of a score row segment
  constexpr int kDB = D / 8;      // n-blocks of an output row
  constexpr int kKS = D / 16;     // k-steps over D
  extern __shared__ __align__(16) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);  // (kRows, S)
  T* sk = sq + kRows * S;              // 2 x (kCols, S)
  T* sv = sk + 2 * kCols * S;          // 2 x (kCols, S)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int64_t tiles = (t + kRows - 1) / kRows;
  const int64_t qt = tiles - 1 - blockIdx.x;  // the longest rows start first, so short ones fill the tail
  const int64_t i0 = qt * kRows;
  const int64_t bi = blockIdx.y / h;
  const int hi = blockIdx.y % h, gi = hi / (h / kv);
  const int64_t ld = static_cast<int64_t>(h + 2 * kv) * D;
  const T* base = qkv + bi * t * ld;
  const T* kp = base + static_cast<int64_t>(h + gi) * D;
  const T* vp = base + static_cast<int64_t>(h + kv + gi) * D;
  const int32_t* db = docs ? docs + bi * t : nullptr;

  const int64_t kt_begin = db ? document_start(db, i0) / kCols : 0;  // tiles before it are outside every row's doc
  const int64_t kt_end = qt + 1;

  load_tile<kRows, D>(sq, base + static_cast<int64_t>(hi) * D, ld, i0, t);
  load_tile<kCols, D>(sk, kp, ld, kt_begin * kCols, t);
  load_tile<kCols, D>(sv, vp, ld, kt_begin * kCols, t);
  cp_async_commit();

  // This thread's two rows of the warp's 16 (accumulator rows g and g + 8) and their documents.
  int64_t row[2];
  int32_t row_doc[2] = {0, 0};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row[r] = i0 + warp * 16 + g + 8 * r;
    if (db) row_doc[r] = db[row[r] < t ? row[r] : t - 1];
  }

  uint32_t qf[kKS][4];  // the warp's q rows as A operands, loaded once
  float o[kDB][4];
#pragma unroll
  for (int n = 0; n < kDB; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // base-2 running max, this lane's share of the sum

  for (int64_t kt = kt_begin; kt < kt_end; ++kt) {
    const int buf = static_cast<int>((kt - kt_begin) & 1);
    if (kt + 1 < kt_end) {
      // The other buffer was last read in the previous step, which ended at a barrier.
      load_tile<kCols, D>(sk + (buf ^ 1) * kCols * S, kp, ld, (kt + 1) * kCols, t);
      load_tile<kCols, D>(sv + (buf ^ 1) * kCols * S, vp, ld, (kt + 1) * kCols, t);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (kt == kt_begin) {
#pragma unroll
      for (int kk = 0; kk < kKS; ++kk) load_a(qf[kk], sq, S, warp * 16, kk * 16);
    }
    const T* kb = sk + buf * kCols * S;
    const T* vb = sv + buf * kCols * S;

    // s (16 x kCols) = q k^T
    float s[kNB][4];
#pragma unroll
    for (int n = 0; n < kNB; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKS; ++kk) {
#pragma unroll
      for (int np = 0; np < kNB / 2; ++np) {
        uint32_t b[4];
        load_b_nk(b, kb, S, np * 16, kk * 16);
        mma<T>(s[2 * np], qf[kk], b[0], b[1]);
        mma<T>(s[2 * np + 1], qf[kk], b[2], b[3]);
      }
    }

    // Scale to base 2; mask keys after the row (the diagonal tile, and keys past T there) and outside its document.
    const int64_t j0 = kt * kCols;
    const bool edge = kt == qt || db != nullptr;
#pragma unroll
    for (int n = 0; n < kNB; ++n) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t j = j0 + n * 8 + 2 * tq + c;
        const int32_t jdoc = db ? db[j < t ? j : t - 1] : 0;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float x = s[n][2 * r + c] * scale_log2;
          if (edge && (j > row[r] || jdoc != row_doc[r])) x = -INFINITY;
          s[n][2 * r + c] = x;
        }
      }
    }

    // Online softmax: rescale what is summed so far to the new maximum, then s becomes p = exp2(x - m).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kNB; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      const float m_new = fmaxf(m[r], quad_max(mx));
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet: every p and corr 0, not NaN
      const float corr = exp2f(m[r] - m_use);
      m[r] = m_new;
      l[r] *= corr;
#pragma unroll
      for (int n = 0; n < kDB; ++n) {
        o[n][2 * r] *= corr;
        o[n][2 * r + 1] *= corr;
      }
#pragma unroll
      for (int n = 0; n < kNB; ++n) {
        const float p0 = exp2f(s[n][2 * r] - m_use), p1 = exp2f(s[n][2 * r + 1] - m_use);
        s[n][2 * r] = p0;
        s[n][2 * r + 1] = p1;
        l[r] += p0 + p1;
      }
    }

    // o (16 x D) += p v
#pragma unroll
    for (int kk = 0; kk < kCols / 16; ++kk) {
      uint32_t a[4];
      a_from_c<T>(a, s, kk);
#pragma unroll
      for (int dp = 0; dp < kDB / 2; ++dp) {
        uint32_t b[4];
        load_b_kn(b, vb, S, dp * 16, kk * 16);
        mma<T>(o[2 * dp], a, b[0], b[1]);
        mma<T>(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // this buffer is refilled by the step after next's prefetch, issued in the next step
  }

  // y = o / l; lse = ln(sum exp(score)) = (m + log2 l) ln 2.
  const int64_t ldy = static_cast<int64_t>(h) * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float lt = quad_sum(l[r]);
    if (row[r] < t) {
      const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
      T* out = y + (bi * t + row[r]) * ldy + static_cast<int64_t>(hi) * D + 2 * tq;
#pragma unroll
      for (int n = 0; n < kDB; ++n)
        *reinterpret_cast<uint32_t*>(out + n * 8) = pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      if (tq == 0) lse[(bi * h + hi) * t + row[r]] = (m[r] + log2f(lt)) / kLog2e;
    }
  }
}

template <class T, int D>
cudaError_t launch_forward(const FlashDims& s, const void* qkv, void* y, float* lse, const int32_t* documents,
                           cudaStream_t stream) {
  constexpr int bytes = forward_shared_bytes<D>();
  auto kernel = forward_kernel<T, D>;
  if (cudaError_t e = allow_shared(kernel, bytes); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((s.t + kRows - 1) / kRows), static_cast<unsigned>(s.b * s.h));
  kernel<<<grid, kThreads, bytes, stream>>>(static_cast<const T*>(qkv), static_cast<T*>(y), lse, documents, s.t, s.h,
                                            s.kv, kLog2e / std::sqrt(static_cast<float>(s.d)));
  return cudaGetLastError();
}

}  // namespace
}  // namespace flash

bool flash_attention_supported(const FlashDims& s) {
  return (s.d == 64 || s.d == 128) && s.kv > 0 && s.h >= s.kv && s.h % s.kv == 0 && s.b >= 0 && s.t >= 0 &&
         s.b * s.h <= 65535 && (s.t + 63) / 64 <= 0x7fffffff;
}

bool flash_attention_aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

cudaError_t flash_attention_forward(const FlashDims& s, const void* qkv, void* y, float* lse, const int32_t* documents,
                                    bool f16, cudaStream_t stream) {
  if (!flash_attention_supported(s)) return cudaErrorInvalidValue;
  if (s.b == 0 || s.t == 0) return cudaSuccess;
  using flash::launch_forward;
  if (f16) {
    return s.d == 64 ? launch_forward<__half, 64>(s, qkv, y, lse, documents, stream)
                     : launch_forward<__half, 128>(s, qkv, y, lse, documents, stream);
  }
  return s.d == 64 ? launch_forward<__nv_bfloat16, 64>(s, qkv, y, lse, documents, stream)
                   : launch_forward<__nv_bfloat16, 128>(s, qkv, y, lse, documents, stream);
}

}  // namespace tandem::ops::cuda
