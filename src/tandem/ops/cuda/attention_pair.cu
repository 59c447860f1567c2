// CUDA kernels of ring attention's block pairs (ops/attention_pair.h): plain ones, one thread block a query row (the
// forward and dq) or a key row (dk and dv), each of its 128 threads taking one key (or query) of a tile of 128 and
// holding up to 4 of the row's D accumulators. The forward keeps a running max and sum over the key tiles (the online
// softmax); the backward recomputes each pair's probabilities from the merged lse. Every sum runs in a fixed order
// (tiles in order, a tile's keys in order, a kv head's query heads in order) and every output element has one writer:
// the same bits every run, no atomics. Not tiled on the tensor cores: correct, far slower than the flash kernels.
// Layouts as the CPU kernels': q, y, dy, dq (B, Tq, H D); kv, dkv (B, Tk, 2 Hkv D), k head g at g D and v head g at
// (Hkv + g) D; lse (B, H, Tq); documents (B, T) i32 of the whole sequences.
#include <cmath>

#include "tandem/ops/cuda/attention_pair.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"

namespace tandem::ops::cuda {
namespace {

constexpr int kBlock = 128;    // threads a block: a tile of keys (or queries)
constexpr int kPerThread = 4;  // accumulators a thread: D <= kBlock * kPerThread (kPairMaxHeadDim)

struct Dims {
  int64_t b, tq, tk, h, kv, d;
};

// Where the blocks sit and the documents (null: one document), for the device.
struct Place {
  int64_t q0, k0, t;
  const int32_t* documents;  // (B, T) or null
};

// The first position of the document that holds position p of sequence `ids` (non-decreasing): its id's lower bound.
__device__ int64_t document_start(const int32_t* ids, int64_t p) {
  const int32_t v = ids[p];
  int64_t lo = 0, hi = p;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (ids[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// The keys [lo, hi) of the block query row i of sequence b sees (ops/attention_pair.h).
__device__ void keys_seen(const Place& pl, int64_t b, int64_t i, int64_t tk, int64_t& lo, int64_t& hi) {
  hi = min(max(pl.q0 + i - pl.k0 + 1, int64_t{0}), tk);
  const int64_t first = pl.documents ? document_start(pl.documents + b * pl.t, pl.q0 + i) : 0;
  lo = min(max(first - pl.k0, int64_t{0}), hi);
}

template <class T>
__device__ float dot(const float* a, const T* b, int64_t d) {
  float acc = 0.0f;
  for (int64_t e = 0; e < d; ++e) acc += a[e] * to_f32(b[e]);
  return acc;
}

// Block (i, b H + h): query row i of head h. Shared: the row's q (D), the tile's probabilities (kBlock).
template <class T>
__global__ void pair_forward_kernel(const T* __restrict__ q, const T* __restrict__ kv, float* __restrict__ y,
                                    float* __restrict__ lse, Dims s, Place pl, float scale) {
  extern __shared__ float shared[];
  __shared__ float red[32];
  float* qs = shared;        // (D)
  float* ps = shared + s.d;  // (kBlock)
  const int64_t i = blockIdx.x, bh = blockIdx.y, b = bh / s.h, h = bh % s.h, g = h / (s.h / s.kv);
  const int64_t ld_q = s.h * s.d, ld_kv = 2 * s.kv * s.d;
  const int tid = threadIdx.x;
  for (int64_t e = tid; e < s.d; e += kBlock) qs[e] = to_f32(q[(b * s.tq + i) * ld_q + h * s.d + e]) * scale;
  __syncthreads();
  int64_t lo, hi;
  keys_seen(pl, b, i, s.tk, lo, hi);
  const T* ks = kv + b * s.tk * ld_kv + g * s.d;  // key j at ks + j ld_kv
  const T* vs = ks + s.kv * s.d;
  float acc[kPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = lo; j0 < hi; j0 += kBlock) {
    const int64_t j = j0 + tid;
    const float score = j < hi ? dot(qs, ks + j * ld_kv, s.d) : -INFINITY;
    const float m_new = fmaxf(m, block_reduce(score, MaxOp{}, -INFINITY, red));
    const float p = j < hi ? expf(score - m_new) : 0.0f;
    ps[tid] = p;
    const float tile_sum = block_reduce(p, SumOp{}, 0.0f, red);  // its barriers make ps visible
    const float corr = expf(m - m_new);
    l = l * corr + tile_sum;
    const int64_t n = min(static_cast<int64_t>(kBlock), hi - j0);
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t e = tid + static_cast<int64_t>(k) * kBlock;
      if (e >= s.d) break;
      float a = acc[k] * corr;
      for (int64_t t = 0; t < n; ++t) a += ps[t] * to_f32(vs[(j0 + t) * ld_kv + e]);
      acc[k] = a;
    }
    m = m_new;
    __syncthreads();  // every thread done with ps before the next tile's
  }
  float* out = y + (b * s.tq + i) * ld_q + h * s.d;
  const bool none = lo >= hi;  // no key of this block: nothing to merge
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t e = tid + static_cast<int64_t>(k) * kBlock;
    if (e < s.d) out[e] = none ? 0.0f : acc[k] / l;
  }
  if (tid == 0) lse[bh * s.tq + i] = none ? -INFINITY : m + logf(l);
}

// rows (B, H, Tq) = rowsum(dO * O) of each query row.
template <class T>
__global__ void row_dot_kernel(const T* __restrict__ y, const T* __restrict__ dy, float* __restrict__ rows, Dims s) {
  const int64_t total = s.b * s.h * s.tq, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < total; r += stride) {
    const int64_t b = r / (s.h * s.tq), h = (r / s.tq) % s.h, i = r % s.tq;
    const int64_t at = (b * s.tq + i) * s.h * s.d + h * s.d;
    float acc = 0.0f;
    for (int64_t e = 0; e < s.d; ++e) acc += to_f32(dy[at + e]) * to_f32(y[at + e]);
    rows[r] = acc;
  }
}

// Block (i, b H + h): dq of query row i of head h, added into dq. Shared: q and dO of the row (D each), the tile's dS.
template <class T>
__global__ void pair_dq_kernel(const T* __restrict__ q, const T* __restrict__ kv, const float* __restrict__ lse,
                               const T* __restrict__ dy, const float* __restrict__ rows, float* __restrict__ dq, Dims s,
                               Place pl, float scale) {
  extern __shared__ float shared[];
  float* qs = shared;      // (D)
  float* dos = qs + s.d;   // (D)
  float* dss = dos + s.d;  // (kBlock)
  const int64_t i = blockIdx.x, bh = blockIdx.y, b = bh / s.h, h = bh % s.h, g = h / (s.h / s.kv);
  const int64_t ld_q = s.h * s.d, ld_kv = 2 * s.kv * s.d, at = (b * s.tq + i) * ld_q + h * s.d;
  const int tid = threadIdx.x;
  for (int64_t e = tid; e < s.d; e += kBlock) {
    qs[e] = to_f32(q[at + e]) * scale;
    dos[e] = to_f32(dy[at + e]);
  }
  __syncthreads();
  int64_t lo, hi;
  keys_seen(pl, b, i, s.tk, lo, hi);
  const float row_lse = lse[bh * s.tq + i], row_dot = rows[bh * s.tq + i];
  const T* ks = kv + b * s.tk * ld_kv + g * s.d;
  const T* vs = ks + s.kv * s.d;
  float acc[kPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t j0 = lo; j0 < hi; j0 += kBlock) {
    const int64_t j = j0 + tid;
    float ds = 0.0f;
    if (j < hi) {
      const float p = expf(dot(qs, ks + j * ld_kv, s.d) - row_lse);
      ds = p * (dot(dos, vs + j * ld_kv, s.d) - row_dot);  // dS = P (dP - D_i)
    }
    dss[tid] = ds;
    __syncthreads();
    const int64_t n = min(static_cast<int64_t>(kBlock), hi - j0);
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t e = tid + static_cast<int64_t>(k) * kBlock;
      if (e >= s.d) break;
      for (int64_t t = 0; t < n; ++t) acc[k] += dss[t] * to_f32(ks[(j0 + t) * ld_kv + e]);
    }
    __syncthreads();
  }
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t e = tid + static_cast<int64_t>(k) * kBlock;
    if (e < s.d) dq[at + e] += scale * acc[k];
  }
}

// Block (j, b Hkv + g): dk and dv of key row j of kv head g, over its group's query heads in order, added into dkv.
// Shared: k and v of the row (D each), the tile's P and dS.
template <class T>
__global__ void pair_dkv_kernel(const T* __restrict__ q, const T* __restrict__ kv, const float* __restrict__ lse,
                                const T* __restrict__ dy, const float* __restrict__ rows, float* __restrict__ dkv,
                                Dims s, Place pl, float scale) {
  extern __shared__ float shared[];
  float* ks = shared;        // (D)
  float* vs = ks + s.d;      // (D)
  float* ps = vs + s.d;      // (kBlock)
  float* dss = ps + kBlock;  // (kBlock)
  const int64_t j = blockIdx.x, bg = blockIdx.y, b = bg / s.kv, g = bg % s.kv, rep = s.h / s.kv;
  const int64_t ld_q = s.h * s.d, ld_kv = 2 * s.kv * s.d, at = (b * s.tk + j) * ld_kv;
  const int tid = threadIdx.x;
  for (int64_t e = tid; e < s.d; e += kBlock) {
    ks[e] = to_f32(kv[at + g * s.d + e]);
    vs[e] = to_f32(kv[at + (s.kv + g) * s.d + e]);
  }
  __syncthreads();
  // The queries at or after the key's position; each row's own range says the rest.
  const int64_t first = max(pl.k0 + j - pl.q0, int64_t{0});
  float acc_k[kPerThread] = {0.0f, 0.0f, 0.0f, 0.0f}, acc_v[kPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t r = 0; r < rep; ++r) {
    const int64_t h = g * rep + r;
    const T* qs = q + b * s.tq * ld_q + h * s.d;  // query i at qs + i ld_q
    const T* dos = dy + b * s.tq * ld_q + h * s.d;
    for (int64_t i0 = first; i0 < s.tq; i0 += kBlock) {
      const int64_t i = i0 + tid;
      float p = 0.0f, ds = 0.0f;
      if (i < s.tq) {
        int64_t lo, hi;
        keys_seen(pl, b, i, s.tk, lo, hi);
        if (j >= lo && j < hi) {
          float score = 0.0f, dp = 0.0f;
          for (int64_t e = 0; e < s.d; ++e) {
            score += to_f32(qs[i * ld_q + e]) * ks[e];
            dp += to_f32(dos[i * ld_q + e]) * vs[e];
          }
          const int64_t row = (b * s.h + h) * s.tq + i;
          p = expf(score * scale - lse[row]);
          ds = p * (dp - rows[row]);
        }
      }
      ps[tid] = p;
      dss[tid] = ds;
      __syncthreads();
      const int64_t n = min(static_cast<int64_t>(kBlock), s.tq - i0);
      for (int k = 0; k < kPerThread; ++k) {
        const int64_t e = tid + static_cast<int64_t>(k) * kBlock;
        if (e >= s.d) break;
        for (int64_t t = 0; t < n; ++t) {
          acc_v[k] += ps[t] * to_f32(dos[(i0 + t) * ld_q + e]);
          acc_k[k] += dss[t] * to_f32(qs[(i0 + t) * ld_q + e]);
        }
      }
      __syncthreads();
    }
  }
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t e = tid + static_cast<int64_t>(k) * kBlock;
    if (e >= s.d) continue;
    dkv[at + g * s.d + e] += scale * acc_k[k];
    dkv[at + (s.kv + g) * s.d + e] += acc_v[k];
  }
}

// y (B, T, H D), lse (B, H, T): one thread an element of y, the row's weights from the two lse.
__global__ void merge_kernel(const float* __restrict__ y_part, const float* __restrict__ lse_part, float* y, float* lse,
                             int64_t b, int64_t t, int64_t h, int64_t d) {
  const int64_t total = b * t * h * d, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t bi = e / (t * h * d), ti = (e / (h * d)) % t, hi = (e / d) % h;
    const int64_t r = (bi * h + hi) * t + ti;
    const float a = lse[r], c = lse_part[r];
    if (a == -INFINITY) {
      y[e] = y_part[e];
    } else if (c != -INFINITY) {
      const float mx = fmaxf(a, c), merged = mx + logf(expf(a - mx) + expf(c - mx));
      y[e] = y[e] * expf(a - merged) + y_part[e] * expf(c - merged);
    }
  }
}

// The row's new lse, once every element of it is merged (a second pass: the first reads the old one).
__global__ void merge_lse_kernel(const float* __restrict__ lse_part, float* lse, int64_t rows) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const float a = lse[r], c = lse_part[r];
    if (a == -INFINITY) {
      lse[r] = c;
    } else if (c != -INFINITY) {
      const float mx = fmaxf(a, c);
      lse[r] = mx + logf(expf(a - mx) + expf(c - mx));
    }
  }
}

Dims dims_of(const Tensor& q, const Tensor& kv, int heads, int kv_heads) {
  return Dims{q.dim(0), q.dim(1), kv.dim(1), heads, kv_heads, q.dim(2) / heads};
}

Place place_of(const PairPlace& p) {
  return Place{p.q0, p.k0, p.documents.defined() ? p.documents.dim(1) : 0,
               p.documents.defined() ? p.documents.data<int32_t>() : nullptr};
}

void check_shape(const char* op, const Dims& s) {
  TANDEM_CHECK(s.d <= kPairMaxHeadDim, op, ": head dim ", s.d, " over the kernels' ", kPairMaxHeadDim);
  TANDEM_CHECK(s.b * std::max(s.h, s.kv) <= 65535 && s.tq <= 2147483647 && s.tk <= 2147483647, op, ": ", s.b,
               " sequences of ", s.h, " heads over the grid's 65535 blocks");
}

}  // namespace

void attention_pair_forward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                            const Tensor& y, const Tensor& lse) {
  const char* op = "attention_pair_forward";
  const Dims s = dims_of(q, kv, heads, kv_heads);
  if (s.b * s.h == 0 || s.tq == 0 || s.d == 0) return;
  check_shape(op, s);
  device::CudaDevice& dev = cuda_device(y);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>(s.tq), static_cast<unsigned>(s.b * s.h));
    const size_t shared = static_cast<size_t>(s.d + kBlock) * sizeof(float);
    pair_forward_kernel<T><<<grid, kBlock, shared, dev.compute_stream()>>>(
        q.data<T>(), kv.data<T>(), y.data<float>(), lse.data<float>(), s, place_of(place), scale);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void attention_merge(const Tensor& y_part, const Tensor& lse_part, const Tensor& y, const Tensor& lse) {
  const int64_t b = y.dim(0), t = y.dim(1), h = lse.dim(1), d = y.dim(2) / h;
  if (y.numel() == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  merge_kernel<<<grid_for(dev, y.numel()), kThreads, 0, dev.compute_stream()>>>(
      y_part.data<float>(), lse_part.data<float>(), y.data<float>(), lse.data<float>(), b, t, h, d);
  TANDEM_CUDA_CHECK_LAUNCH();
  merge_lse_kernel<<<grid_for(dev, lse.numel()), kThreads, 0, dev.compute_stream()>>>(lse_part.data<float>(),
                                                                                      lse.data<float>(), lse.numel());
  TANDEM_CUDA_CHECK_LAUNCH();
}

void attention_pair_backward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                             const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dq,
                             const Tensor& dkv) {
  const char* op = "attention_pair_backward";
  const Dims s = dims_of(q, kv, heads, kv_heads);
  if (s.b * s.h == 0 || s.tq == 0 || s.tk == 0 || s.d == 0) return;
  check_shape(op, s);
  device::CudaDevice& dev = cuda_device(dq);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  // (B, H, Tq) f32: attention_pair_backward_scratch_bytes
  Tensor rows = Tensor::empty({s.b, s.h, s.tq}, DType::F32, dev, "attention pair row dots");
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    row_dot_kernel<T><<<grid_for(dev, rows.numel()), kThreads, 0, dev.compute_stream()>>>(y.data<T>(), dy.data<T>(),
                                                                                          rows.data<float>(), s);
    TANDEM_CUDA_CHECK_LAUNCH();
    const Place pl = place_of(place);
    pair_dq_kernel<T><<<dim3(static_cast<unsigned>(s.tq), static_cast<unsigned>(s.b * s.h)), kBlock,
                        static_cast<size_t>(2 * s.d + kBlock) * sizeof(float), dev.compute_stream()>>>(
        q.data<T>(), kv.data<T>(), lse.data<float>(), dy.data<T>(), rows.data<float>(), dq.data<float>(), s, pl, scale);
    TANDEM_CUDA_CHECK_LAUNCH();
    pair_dkv_kernel<T><<<dim3(static_cast<unsigned>(s.tk), static_cast<unsigned>(s.b * s.kv)), kBlock,
                         static_cast<size_t>(2 * s.d + 2 * kBlock) * sizeof(float), dev.compute_stream()>>>(
        q.data<T>(), kv.data<T>(), lse.data<float>(), dy.data<T>(), rows.data<float>(), dkv.data<float>(), s, pl,
        scale);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
