// The one-pass packed backward shared by LayerNorm (layernorm.cu) and RMSNorm (rmsnorm.cu), for C a whole number of
// 16-byte packs (at most 1024 a row) and every tensor 16-byte aligned. Block b takes rows [b * rows_per_block, ...)
// in groups of R: thread t holds packs t, t + 256, ..., t + 256 (P - 1) of each row of the group (those below
// `packs`), the group's row sums are one block reduction (warp sums, then the 8 warps' sums in warp order), then the
// thread writes its part of dx and adds its columns' parameter-gradient terms, in row order, into registers; at the
// end row b of each f32 partial matrix (gridDim.x, C) gets the block's sums, which column_sum.cuh's finishing pass
// adds in block order (no atomics: the same bits on every run).
//   LayerNorm (kCentered): xhat = (x - mean) rstd, dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma;
//     partial[0] sums dy xhat (dgamma), partial[1] dy (dbeta).
//   RMSNorm: xhat = x rstd, dx = rstd (g - xhat mean(g xhat)); partial[0] sums dy round_T(xhat) (dgamma: the
//     normalised x as the forward multiplied it); mean is not read.
// dres (N, C) or null is added to dx in fp32 before its one rounding. dy and dx may be the same tensor (each element
// is read before the thread that reads it writes it), so no __restrict__ on them.
#pragma once

#include <cstdint>

#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/cuda/workspace.h"

namespace tandem::ops::cuda {

inline constexpr int kNormWarps = kThreads / 32;

// The register budget by P, the packs a thread holds per row. At P = 2 (C of 257-512 packs: d 2049-4096 in bf16)
// groups of two rows took 168 registers a thread, so one block of 8 warps an SM, and ran at 1.2 TB/s; there the
// kernel takes one row at a time and loads the row's dres with its x and dy, which fits two blocks an SM in 128
// registers (1.7 TB/s on the 6.86B's d4096). P = 1 and 4 keep groups of 4 / P rows with dres loaded just before dx
// is written: the same change at P = 1 measured slower (12.1 against 11.2 ms a step on the 1.64B's d1600). Neither
// changes the bits: each row is reduced on its own and the column sums add the rows in order.
template <int P>
inline constexpr bool kNormCompact = P == 2;
template <int P>
inline constexpr int kNormRowsAtOnce = kNormCompact<P> ? 1 : layernorm_backward_row_multiple(P);

// v rounded to T and widened again.
template <class T>
__device__ __forceinline__ float rounded(float v) {
  return to_f32(from_f32<T>(v));
}

template <class T, int P, int R, bool kCentered>
__global__ void __launch_bounds__(kThreads, kNormCompact<P> ? 2 : 0)  // 0: no minimum
    norm_backward_packed_kernel(const T* dy, const T* __restrict__ x, const T* __restrict__ gamma,
                                const float* __restrict__ mean, const float* __restrict__ rstd, const T* dres, T* dx,
                                int64_t n, int64_t packs, int64_t rows_per_block, float* __restrict__ partial) {
  constexpr int V = kPack<T>;
  constexpr int S = kCentered ? 2 : 1;         // row sums per row: [mean(g),] mean(g xhat)
  __shared__ float red[2][S * R][kNormWarps];  // two buffers: one barrier per group suffices
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c = packs * V;
  const float inv_c = 1.0f / static_cast<float>(c);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < n ? r0 + rows_per_block : n;
  const auto* xp = reinterpret_cast<const Pack<T>*>(x);
  const auto* dyp = reinterpret_cast<const Pack<T>*>(dy);
  const auto* resp = reinterpret_cast<const Pack<T>*>(dres);
  auto* dxp = reinterpret_cast<Pack<T>*>(dx);

  bool on[P];
  float g[P][V], acc_g[P][V], acc_b[P][V];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t p = threadIdx.x + static_cast<int64_t>(kThreads) * i;
    on[i] = p < packs;
    Pack<T> gv;
    if (on[i]) gv = reinterpret_cast<const Pack<T>*>(gamma)[p];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      g[i][k] = on[i] ? to_f32(gv.v[k]) : 0.0f;
      acc_g[i][k] = 0.0f;
      acc_b[i][k] = 0.0f;
    }
  }

  int buf = 0;
  for (int64_t row0 = r0; row0 < r1; row0 += R, buf ^= 1) {
    Pack<T> xv[R][P], gv[R][P];
    Pack<T> rv[kNormCompact<P> ? R : 1][P];  // the group's dres, when loaded with x and dy
    float mu[R], rs[R], s[S * R];
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      const int64_t row = row0 + rr;
      const bool valid = row < r1;
      mu[rr] = kCentered && valid ? mean[row] : 0.0f;
      rs[rr] = valid ? rstd[row] : 0.0f;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (valid && on[i]) {
          const int64_t at = row * packs + threadIdx.x + static_cast<int64_t>(kThreads) * i;
          xv[rr][i] = xp[at];
          gv[rr][i] = dyp[at];
          if constexpr (kNormCompact<P>) {
            if (resp) rv[rr][i] = resp[at];
          }
        }
      }
    }
    // xhat of element k of pack i of row rr.
    auto xhat_of = [&](int rr, int i, int k) {
      const float xf = to_f32(xv[rr][i].v[k]);
      return (kCentered ? xf - mu[rr] : xf) * rs[rr];
    };
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      float sum_g = 0.0f, sum_gx = 0.0f;
      if (row0 + rr < r1) {
#pragma unroll
        for (int i = 0; i < P; ++i) {
          if (on[i]) {
#pragma unroll
            for (int k = 0; k < V; ++k) {
              const float gg = to_f32(gv[rr][i].v[k]) * g[i][k];
              if (kCentered) sum_g += gg;
              sum_gx += gg * xhat_of(rr, i, k);
            }
          }
        }
      }
      if (kCentered) s[S * rr] = warp_reduce(sum_g, SumOp{});
      s[S * rr + S - 1] = warp_reduce(sum_gx, SumOp{});
    }
    if (lane == 0) {
#pragma unroll
      for (int j = 0; j < S * R; ++j) red[buf][j][warp] = s[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < S * R; ++j) {
      float t = red[buf][j][0];
#pragma unroll
      for (int w = 1; w < kNormWarps; ++w) t += red[buf][j][w];
      s[j] = t;
    }
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      const int64_t row = row0 + rr;
      if (row >= r1) continue;
      const float mean_g = kCentered ? s[S * rr] * inv_c : 0.0f, mean_gx = s[S * rr + S - 1] * inv_c;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (!on[i]) continue;
        const int64_t at = row * packs + threadIdx.x + static_cast<int64_t>(kThreads) * i;
        Pack<T> res;
        if constexpr (kNormCompact<P>) {
          if (resp) res = rv[rr][i];
        } else {
          if (resp) res = resp[at];
        }
        Pack<T> out;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float d = to_f32(gv[rr][i].v[k]);
          const float xhat = xhat_of(rr, i, k);
          float v =
              kCentered ? rs[rr] * (d * g[i][k] - mean_g - xhat * mean_gx) : rs[rr] * (d * g[i][k] - xhat * mean_gx);
          if (resp) v += to_f32(res.v[k]);
          out.v[k] = from_f32<T>(v);
          if (kCentered) {
            acc_g[i][k] += d * xhat;
            acc_b[i][k] += d;
          } else {
            acc_g[i][k] += d * rounded<T>(xhat);
          }
        }
        dxp[at] = out;
      }
    }
  }

  float* pg = partial + static_cast<int64_t>(blockIdx.x) * c;                // dgamma row of this block
  float* pb = partial + (static_cast<int64_t>(gridDim.x) + blockIdx.x) * c;  // dbeta row (kCentered)
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (!on[i]) continue;
    const int64_t col = (threadIdx.x + static_cast<int64_t>(kThreads) * i) * V;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      pg[col + k] = acc_g[i][k];
      if (kCentered) pb[col + k] = acc_b[i][k];
    }
  }
}

}  // namespace tandem::ops::cuda
