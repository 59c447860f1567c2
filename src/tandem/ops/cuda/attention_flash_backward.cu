// The flash attention backward (attention_flash.h), deterministic: three kernels, each output element written by one
// thread once, every sum in a fixed order, no atomics.
//   1. rowdot: dsum (B, H, T) f32 = rowsum(dO * O), the D_i of dS_ij = P_ij (dP_ij - D_i).
//   2. dkdv: one block per (64-key tile, batch element, kv head); each warp owns 16 keys and computes, in registers,
//      S^T = k q^T and dP^T = v dO^T for a tile of queries at a time, P^T = exp(scale S^T - lse) from the forward's
//      lse, then dv += P^T dO and dk += dS^T q. It walks the query heads of its group, then the query tiles from the
//      diagonal on (to the end of its keys' documents), in that order.
//   3. dq: one block per (64-row query tile, batch element, query head); each warp owns 16 rows and walks the key
//      tiles in order up to the diagonal: S = q k^T, dP = dO v^T, dq += dS k.
// Scratch: dsum alone, B H T f32. Query and dO tiles (kernel 2) and key and value tiles (kernel 3) are double-buffered
// by cp.async, the next tile's copy overlapping this tile's products.
#include <cmath>

#include "tandem/ops/cuda/attention_flash_tiles.cuh"

namespace tandem::ops::cuda {
namespace flash {
namespace {

constexpr int kBlock = 64;  // keys per dkdv block, query rows per dq block, keys per dq tile: 16 per warp

// Query rows per dkdv step: fewer at D 128, whose dk and dv accumulators already take 128 registers a thread.
template <int D>
__host__ __device__ constexpr int dkdv_rows() {
  return D == 128 ? 32 : 64;
}
template <int D>
constexpr int dkdv_shared_bytes() {
  // k, v, then two buffers each of q and dO (16-bit), then two each of the query rows' lse and dsum (f32)
  return (2 * kBlock + 4 * dkdv_rows<D>()) * (D + kPad) * 2 + 4 * dkdv_rows<D>() * 4;
}
template <int D>
constexpr int dq_shared_bytes() {
  return 6 * kBlock * (D + kPad) * 2;  // q, dO, then two buffers each of k and v
}

// dsum[b, h, i] = sum_k dy[b, i, h, k] y[b, i, h, k]: eight lanes per row, each summing its 16-byte pieces in order,
// then a fixed butterfly over the eight.
template <class T, int D>
__global__ void rowdot_kernel(const T* __restrict__ y, const T* __restrict__ dy, float* __restrict__ dsum, int64_t b,
                              int64_t t, int h) {
  const int64_t rows = b * t * h;  // (B, T, H) rows of D, in y's order
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 8;
  const int sub = threadIdx.x & 7;
  float acc = 0.0f;
  if (row < rows) {
#pragma unroll
    for (int c = 0; c < D / 64; ++c) {
      const int64_t off = row * D + (sub + 8 * c) * 8;
      const uint4 yv = *reinterpret_cast<const uint4*>(y + off);
      const uint4 gv = *reinterpret_cast<const uint4*>(dy + off);
      const uint32_t ya[4] = {yv.x, yv.y, yv.z, yv.w}, ga[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 a = unpack2<T>(ya[k]), c2 = unpack2<T>(ga[k]);
        acc += a.x * c2.x;
        acc += a.y * c2.y;
      }
    }
  }
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  acc += __shfl_xor_sync(0xffffffffu, acc, 4);
  if (sub == 0 && row < rows) {
    const int64_t bi = row / (t * h), rem = row % (t * h);
    dsum[(bi * h + rem % h) * t + rem / h] = acc;
  }
}

// dk, dv of one 64-key tile of kv head gi: see the file comment. scale_log2 = log2(e) / sqrt(D), scale = 1 / sqrt(D).
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(const T* __restrict__ qkv, const T* __restrict__ dy, const float* __restrict__ lse,
                const float* __restrict__ dsum, T* __restrict__ dqkv, const int32_t* __restrict__ docs, int64_t t,
                int h, int kv, float scale_log2, float scale) {
  constexpr int Br = dkdv_rows<D>();  // query rows per step
  constexpr int S = D + kPad;
  constexpr int kNB = Br / 8;  // n-blocks of a (key, query) score row segment
  constexpr int kDB = D / 8;   // n-blocks of a dk or dv row
  constexpr int kKS = D / 16;  // k-steps over D
  extern __shared__ __align__(16) unsigned char smem[];
  T* sk = reinterpret_cast<T*>(smem);                        // (kBlock, S)
  T* sv = sk + kBlock * S;                                   // (kBlock, S)
  T* sq = sv + kBlock * S;                                   // 2 x (Br, S)
  T* sdo = sq + 2 * Br * S;                                  // 2 x (Br, S)
  float* slse = reinterpret_cast<float*>(sdo + 2 * Br * S);  // 2 x (Br) lse of the step's query rows
  float* sdsum = slse + 2 * Br;                              // 2 x (Br) their dsum

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kBlock;  // the longest key tiles (first keys) start first
  const int64_t bi = blockIdx.y / kv;
  const int gi = blockIdx.y % kv, rep = h / kv;
  const int64_t ld = static_cast<int64_t>(h + 2 * kv) * D, ldy = static_cast<int64_t>(h) * D;
  const T* base = qkv + bi * t * ld;
  const T* dyb = dy + bi * t * ldy;
  const int32_t* db = docs ? docs + bi * t : nullptr;

  // Query tiles that see any of these keys: from the one holding key j0 to the end of the last key's document.
  const int64_t j_last = j0 + kBlock - 1 < t ? j0 + kBlock - 1 : t - 1;
  const int64_t q_begin = j0 / Br;
  const int64_t q_end = ((db ? document_end(db, j_last, t) : t) + Br - 1) / Br;
  const int64_t nq = q_end - q_begin, steps = rep * nq;

  load_tile<kBlock, D>(sk, base + static_cast<int64_t>(h + gi) * D, ld, j0, t);
  load_tile<kBlock, D>(sv, base + static_cast<int64_t>(h + kv + gi) * D, ld, j0, t);
  auto load_step = [&](int64_t step, int buf) {  // step = (head r of the group) nq + (query tile - q_begin)
    const int64_t hq = static_cast<int64_t>(gi) * rep + step / nq, i0 = (q_begin + step % nq) * Br;
    load_tile<Br, D>(sq + buf * Br * S, base + hq * D, ld, i0, t);
    load_tile<Br, D>(sdo + buf * Br * S, dyb + hq * D, ldy, i0, t);
    // The rows' statistics ride along, so the step reads them from shared memory rather than waiting on global
    // loads between its products.
    if (threadIdx.x < 2 * Br) {
      const int k = threadIdx.x % Br;
      const bool second = threadIdx.x >= Br;
      const int64_t i = i0 + k;
      const float* src = (second ? dsum : lse) + (bi * h + hq) * t + (i < t ? i : 0);
      cp_async4((second ? sdsum : slse) + buf * Br + k, src, i < t);
    }
  };
  load_step(0, 0);
  cp_async_commit();

  int64_t key[2];  // this thread's two keys (accumulator rows g and g + 8 of the warp's 16)
  int32_t key_doc[2] = {0, 0};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    key[r] = j0 + warp * 16 + g + 8 * r;
    if (db) key_doc[r] = db[key[r] < t ? key[r] : t - 1];
  }

  float dk[kDB][4], dv[kDB][4];
#pragma unroll
  for (int n = 0; n < kDB; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;

  for (int64_t step = 0; step < steps; ++step) {
    const int buf = static_cast<int>(step & 1);
    if (step + 1 < steps) {
      load_step(step + 1, buf ^ 1);  // that buffer was last read in the previous step, which ended at a barrier
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int64_t i0 = (q_begin + step % nq) * Br;
    const T* qb = sq + buf * Br * S;
    const T* dob = sdo + buf * Br * S;

    // st (16 keys x Br queries) = k q^T, dpt = v dO^T
    float st[kNB][4], dpt[kNB][4];
#pragma unroll
    for (int n = 0; n < kNB; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKS; ++kk) {
      uint32_t ak[4], av[4];
      load_a(ak, sk, S, warp * 16, kk * 16);
      load_a(av, sv, S, warp * 16, kk * 16);
#pragma unroll
      for (int np = 0; np < kNB / 2; ++np) {
        uint32_t b[4];
        load_b_nk(b, qb, S, np * 16, kk * 16);
        mma<T>(st[2 * np], ak, b[0], b[1]);
        mma<T>(st[2 * np + 1], ak, b[2], b[3]);
        load_b_nk(b, dob, S, np * 16, kk * 16);
        mma<T>(dpt[2 * np], av, b[0], b[1]);
        mma<T>(dpt[2 * np + 1], av, b[2], b[3]);
      }
    }

    // P^T = exp2(scale_log2 S^T - lse log2 e), 0 where masked (query before the key, past T, or in another
    // document); dS^T = P^T (dP^T - dsum), into dpt.
    const bool edge = i0 < j0 + kBlock || i0 + Br > t || db != nullptr;
#pragma unroll
    for (int n = 0; n < kNB; ++n) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int k = n * 8 + 2 * tq + c;
        const int64_t i = i0 + k, ic = i < t ? i : t - 1;
        const float l2 = slse[buf * Br + k] * kLog2e, dd = sdsum[buf * Br + k];
        const int32_t idoc = db ? db[ic] : 0;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float p = exp2f(fmaf(st[n][2 * r + c], scale_log2, -l2));
          if (edge && (i >= t || key[r] > i || idoc != key_doc[r])) p = 0.0f;
          st[n][2 * r + c] = p;
          dpt[n][2 * r + c] = p * (dpt[n][2 * r + c] - dd);
        }
      }
    }

    // dv (16 x D) += P^T dO, dk += dS^T q, over the Br queries
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk) {
      uint32_t ap[4], ad[4];
      a_from_c<T>(ap, st, kk);
      a_from_c<T>(ad, dpt, kk);
#pragma unroll
      for (int dp = 0; dp < kDB / 2; ++dp) {
        uint32_t b[4];
        load_b_kn(b, dob, S, dp * 16, kk * 16);
        mma<T>(dv[2 * dp], ap, b[0], b[1]);
        mma<T>(dv[2 * dp + 1], ap, b[2], b[3]);
        load_b_kn(b, qb, S, dp * 16, kk * 16);
        mma<T>(dk[2 * dp], ad, b[0], b[1]);
        mma<T>(dk[2 * dp + 1], ad, b[2], b[3]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= t) continue;
    T* out = dqkv + (bi * t + key[r]) * ld + 2 * tq;
    T* out_k = out + static_cast<int64_t>(h + gi) * D;
    T* out_v = out + static_cast<int64_t>(h + kv + gi) * D;
#pragma unroll
    for (int n = 0; n < kDB; ++n) {
      *reinterpret_cast<uint32_t*>(out_k + n * 8) = pack2<T>(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      *reinterpret_cast<uint32_t*>(out_v + n * 8) = pack2<T>(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

// dq of one 64-row query tile of query head hi: see the file comment.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(const T* __restrict__ qkv, const T* __restrict__ dy, const float* __restrict__ lse,
              const float* __restrict__ dsum, T* __restrict__ dqkv, const int32_t* __restrict__ docs, int64_t t, int h,
              int kv, float scale_log2, float scale) {
  constexpr int S = D + kPad;
  constexpr int kNB = kBlock / 8;
  constexpr int kDB = D / 8;
  constexpr int kKS = D / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);  // (kBlock, S)
  T* sdo = sq + kBlock * S;            // (kBlock, S)
  T* sk = sdo + kBlock * S;            // 2 x (kBlock, S)
  T* sv = sk + 2 * kBlock * S;         // 2 x (kBlock, S)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int64_t tiles = (t + kBlock - 1) / kBlock;
  const int64_t qt = tiles - 1 - blockIdx.x;  // the longest rows start first
  const int64_t i0 = qt * kBlock;
  const int64_t bi = blockIdx.y / h;
  const int hi = blockIdx.y % h, gi = hi / (h / kv);
  const int64_t ld = static_cast<int64_t>(h + 2 * kv) * D, ldy = static_cast<int64_t>(h) * D;
  const T* base = qkv + bi * t * ld;
  const T* kp = base + static_cast<int64_t>(h + gi) * D;
  const T* vp = base + static_cast<int64_t>(h + kv + gi) * D;
  const int32_t* db = docs ? docs + bi * t : nullptr;
  const int64_t kt_begin = db ? document_start(db, i0) / kBlock : 0;
  const int64_t kt_end = qt + 1;

  load_tile<kBlock, D>(sq, base + static_cast<int64_t>(hi) * D, ld, i0, t);
  load_tile<kBlock, D>(sdo, dy + bi * t * ldy + static_cast<int64_t>(hi) * D, ldy, i0, t);
  load_tile<kBlock, D>(sk, kp, ld, kt_begin * kBlock, t);
  load_tile<kBlock, D>(sv, vp, ld, kt_begin * kBlock, t);
  cp_async_commit();

  int64_t row[2];
  int32_t row_doc[2] = {0, 0};
  float l2[2], dd[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row[r] = i0 + warp * 16 + g + 8 * r;
    const int64_t rc = row[r] < t ? row[r] : t - 1;
    if (db) row_doc[r] = db[rc];
    l2[r] = lse[(bi * h + hi) * t + rc] * kLog2e;
    dd[r] = dsum[(bi * h + hi) * t + rc];
  }

  float dq[kDB][4];
#pragma unroll
  for (int n = 0; n < kDB; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

  for (int64_t kt = kt_begin; kt < kt_end; ++kt) {
    const int buf = static_cast<int>((kt - kt_begin) & 1);
    if (kt + 1 < kt_end) {
      load_tile<kBlock, D>(sk + (buf ^ 1) * kBlock * S, kp, ld, (kt + 1) * kBlock, t);
      load_tile<kBlock, D>(sv + (buf ^ 1) * kBlock * S, vp, ld, (kt + 1) * kBlock, t);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* kb = sk + buf * kBlock * S;
    const T* vb = sv + buf * kBlock * S;

    // s (16 x 64) = q k^T, dp = dO v^T
    float s[kNB][4], dp[kNB][4];
#pragma unroll
    for (int n = 0; n < kNB; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKS; ++kk) {
      uint32_t aq[4], ag[4];
      load_a(aq, sq, S, warp * 16, kk * 16);
      load_a(ag, sdo, S, warp * 16, kk * 16);
#pragma unroll
      for (int np = 0; np < kNB / 2; ++np) {
        uint32_t b[4];
        load_b_nk(b, kb, S, np * 16, kk * 16);
        mma<T>(s[2 * np], aq, b[0], b[1]);
        mma<T>(s[2 * np + 1], aq, b[2], b[3]);
        load_b_nk(b, vb, S, np * 16, kk * 16);
        mma<T>(dp[2 * np], ag, b[0], b[1]);
        mma<T>(dp[2 * np + 1], ag, b[2], b[3]);
      }
    }

    // dS = P (dP - dsum), into dp; P 0 where masked (keys after the row, and outside its document).
    const int64_t j0 = kt * kBlock;
    const bool edge = kt == qt || db != nullptr;
#pragma unroll
    for (int n = 0; n < kNB; ++n) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t j = j0 + n * 8 + 2 * tq + c;
        const int32_t jdoc = db ? db[j < t ? j : t - 1] : 0;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float p = exp2f(fmaf(s[n][2 * r + c], scale_log2, -l2[r]));
          if (edge && (j > row[r] || jdoc != row_doc[r])) p = 0.0f;
          dp[n][2 * r + c] = p * (dp[n][2 * r + c] - dd[r]);
        }
      }
    }

    // dq (16 x D) += dS k
#pragma unroll
    for (int kk = 0; kk < kBlock / 16; ++kk) {
      uint32_t a[4];
      a_from_c<T>(a, dp, kk);
#pragma unroll
      for (int d2 = 0; d2 < kDB / 2; ++d2) {
        uint32_t b[4];
        load_b_kn(b, kb, S, d2 * 16, kk * 16);
        mma<T>(dq[2 * d2], a, b[0], b[1]);
        mma<T>(dq[2 * d2 + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= t) continue;
    T* out = dqkv + (bi * t + row[r]) * ld + static_cast<int64_t>(hi) * D + 2 * tq;
#pragma unroll
    for (int n = 0; n < kDB; ++n)
      *reinterpret_cast<uint32_t*>(out + n * 8) = pack2<T>(dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
  }
}

template <class T, int D>
cudaError_t launch_backward(const FlashDims& s, const T* qkv, const T* y, const float* lse, const T* dy, T* dqkv,
                            float* dsum, const int32_t* documents, cudaStream_t stream) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(D)), scale_log2 = scale * kLog2e;
  const int64_t rows = s.b * s.t * s.h;
  constexpr int kRowdotThreads = 256;
  rowdot_kernel<T, D>
      <<<static_cast<unsigned>((rows * 8 + kRowdotThreads - 1) / kRowdotThreads), kRowdotThreads, 0, stream>>>(
          y, dy, dsum, s.b, s.t, s.h);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;

  const unsigned tiles = static_cast<unsigned>((s.t + kBlock - 1) / kBlock);
  constexpr int kv_bytes = dkdv_shared_bytes<D>();
  if (cudaError_t e = allow_shared(dkdv_kernel<T, D>, kv_bytes); e != cudaSuccess) return e;
  dkdv_kernel<T, D><<<dim3(tiles, static_cast<unsigned>(s.b * s.kv)), kThreads, kv_bytes, stream>>>(
      qkv, dy, lse, dsum, dqkv, documents, s.t, s.h, s.kv, scale_log2, scale);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;

  constexpr int q_bytes = dq_shared_bytes<D>();
  if (cudaError_t e = allow_shared(dq_kernel<T, D>, q_bytes); e != cudaSuccess) return e;
  dq_kernel<T, D><<<dim3(tiles, static_cast<unsigned>(s.b * s.h)), kThreads, q_bytes, stream>>>(
      qkv, dy, lse, dsum, dqkv, documents, s.t, s.h, s.kv, scale_log2, scale);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_backward(const FlashDims& s, const void* qkv, const void* y, const float* lse, const void* dy,
                            void* dqkv, float* dsum, const int32_t* documents, cudaStream_t stream) {
  auto run = [&](auto d) {
    return launch_backward<T, decltype(d)::value>(s, static_cast<const T*>(qkv), static_cast<const T*>(y), lse,
                                                  static_cast<const T*>(dy), static_cast<T*>(dqkv), dsum, documents,
                                                  stream);
  };
  return s.d == 64 ? run(std::integral_constant<int, 64>{}) : run(std::integral_constant<int, 128>{});
}

}  // namespace
}  // namespace flash

cudaError_t flash_attention_backward(const FlashDims& s, const void* qkv, const void* y, const float* lse,
                                     const void* dy, void* dqkv, float* scratch, const int32_t* documents, bool f16,
                                     cudaStream_t stream) {
  if (!flash_attention_supported(s)) return cudaErrorInvalidValue;
  if (s.b == 0 || s.t == 0) return cudaSuccess;
  return f16 ? flash::launch_backward<__half>(s, qkv, y, lse, dy, dqkv, scratch, documents, stream)
             : flash::launch_backward<__nv_bfloat16>(s, qkv, y, lse, dy, dqkv, scratch, documents, stream);
}

}  // namespace tandem::ops::cuda
