// The plain CUDA attention kernels (see attention_plain.h): causal attention with fp32 math for any float dtype.
// Forward: one block per (query row, batch-head) computes the row's scores into shared memory, its log-sum-exp, and
// the weighted sum of v. Backward recomputes the probabilities from lse: one block per query row for dq, one per key
// row for dk and dv, each summing in a fixed order (no atomics).
// Layouts: qkv and dqkv (B, T, 3C) with head h at columns h*D of each of q|k|v; y and dy (B, T, C); lse (B, H, T).
#include <climits>

#include "tandem/ops/cuda/attention_plain.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"

namespace tandem::ops::cuda {
namespace {

constexpr int kAttentionThreads = 128;

struct Dims {
  int64_t b, t, c;
  int h, d;
};

Dims dims_of(const Tensor& qkv, int heads) {
  const int64_t c = qkv.dim(2) / 3;
  return Dims{qkv.dim(0), qkv.dim(1), c, heads, static_cast<int>(c / heads)};
}

template <class T>
__global__ void plain_forward_kernel(const T* __restrict__ qkv, T* __restrict__ y, float* __restrict__ lse, Dims s,
                                     float scale) {
  extern __shared__ float smem[];
  __shared__ float red[32];
  float* q = smem;        // (D) this query row
  float* p = smem + s.d;  // (T) scores of keys 0..i, then their exp
  const int64_t i = blockIdx.x, bh = blockIdx.y;
  const int64_t bi = bh / s.h, hi = bh % s.h;
  const int64_t ld = 3 * s.c;
  const T* head = qkv + bi * s.t * ld + hi * s.d;  // this head's q columns in row 0; k at +C, v at +2C
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) q[k] = to_f32(head[i * ld + k]);
  __syncthreads();
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const T* kj = head + j * ld + s.c;  // (D)
    float dot = 0.0f;
    for (int k = 0; k < s.d; ++k) dot += q[k] * to_f32(kj[k]);
    p[j] = dot * scale;
    mx = fmaxf(mx, p[j]);
  }
  mx = block_reduce(mx, MaxOp{}, -INFINITY, red);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    p[j] = expf(p[j] - mx);
    sum += p[j];
  }
  sum = block_reduce(sum, SumOp{}, 0.0f, red);  // its barriers also publish every p[j]
  const float inv = 1.0f / sum;
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) {
    const T* v = head + 2 * s.c + k;  // column k of v, rows ld apart
    float acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j) acc += p[j] * to_f32(v[j * ld]);
    y[(bi * s.t + i) * s.c + hi * s.d + k] = from_f32<T>(acc * inv);
  }
  if (threadIdx.x == 0) lse[bh * s.t + i] = mx + logf(sum);
}

// dsum (B, H, T) = rowsum(dO * O) per head: D_i = sum_j P_ij dP_ij, since O = P V.
template <class T>
__global__ void plain_rowdot_kernel(const T* __restrict__ y, const T* __restrict__ dy, float* __restrict__ dsum,
                                    Dims s) {
  const int64_t total = s.b * s.h * s.t;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t bh = e / s.t, i = e - bh * s.t;
    const int64_t off = ((bh / s.h) * s.t + i) * s.c + (bh % s.h) * s.d;
    float acc = 0.0f;
    for (int k = 0; k < s.d; ++k) acc += to_f32(dy[off + k]) * to_f32(y[off + k]);
    dsum[e] = acc;
  }
}

// dq_i = scale sum_{j <= i} dS_ij k_j, with dS_ij = P_ij (dO_i . v_j - D_i) and P_ij = exp(scale q_i . k_j - lse_i).
template <class T>
__global__ void plain_dq_kernel(const T* __restrict__ qkv, const T* __restrict__ dy, const float* __restrict__ lse,
                                const float* __restrict__ dsum, T* __restrict__ dqkv, Dims s, float scale) {
  extern __shared__ float smem[];
  float* q = smem;             // (D) q_i
  float* g = smem + s.d;       // (D) dO_i
  float* ds = smem + 2 * s.d;  // (T) dS_ij for j <= i
  const int64_t i = blockIdx.x, bh = blockIdx.y;
  const int64_t bi = bh / s.h, hi = bh % s.h;
  const int64_t ld = 3 * s.c;
  const T* head = qkv + bi * s.t * ld + hi * s.d;
  const T* go = dy + (bi * s.t + i) * s.c + hi * s.d;
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) {
    q[k] = to_f32(head[i * ld + k]);
    g[k] = to_f32(go[k]);
  }
  __syncthreads();
  const float l = lse[bh * s.t + i], dd = dsum[bh * s.t + i];
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const T* kj = head + j * ld + s.c;      // (D)
    const T* vj = head + j * ld + 2 * s.c;  // (D)
    float qk = 0.0f, gv = 0.0f;
    for (int k = 0; k < s.d; ++k) {
      qk += q[k] * to_f32(kj[k]);
      gv += g[k] * to_f32(vj[k]);
    }
    ds[j] = expf(qk * scale - l) * (gv - dd);
  }
  __syncthreads();
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) {
    const T* kcol = head + s.c + k;  // column k of K
    float acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j) acc += ds[j] * to_f32(kcol[j * ld]);
    dqkv[(bi * s.t + i) * ld + hi * s.d + k] = from_f32<T>(scale * acc);
  }
}

// For key row j: dk_j = scale sum_{i >= j} dS_ij q_i and dv_j = sum_{i >= j} P_ij dO_i.
template <class T>
__global__ void plain_dkdv_kernel(const T* __restrict__ qkv, const T* __restrict__ dy, const float* __restrict__ lse,
                                  const float* __restrict__ dsum, T* __restrict__ dqkv, Dims s, float scale) {
  extern __shared__ float smem[];
  const int64_t j = blockIdx.x, bh = blockIdx.y;
  const int64_t rows = s.t - j;  // queries i = j .. T-1 see key j
  float* kv = smem;              // (2D) k_j, then v_j
  float* p = smem + 2 * s.d;     // (T - j) P_ij
  float* ds = p + rows;          // (T - j) dS_ij
  const int64_t bi = bh / s.h, hi = bh % s.h;
  const int64_t ld = 3 * s.c;
  const T* head = qkv + bi * s.t * ld + hi * s.d;
  const T* g0 = dy + bi * s.t * s.c + hi * s.d;  // this head's dO columns in row 0, rows C apart
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) {
    kv[k] = to_f32(head[j * ld + s.c + k]);
    kv[s.d + k] = to_f32(head[j * ld + 2 * s.c + k]);
  }
  __syncthreads();
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t i = j + r;
    const T* qi = head + i * ld;  // (D)
    const T* gi = g0 + i * s.c;   // (D)
    float qk = 0.0f, gv = 0.0f;
    for (int k = 0; k < s.d; ++k) {
      qk += to_f32(qi[k]) * kv[k];
      gv += to_f32(gi[k]) * kv[s.d + k];
    }
    const float pij = expf(qk * scale - lse[bh * s.t + i]);
    p[r] = pij;
    ds[r] = pij * (gv - dsum[bh * s.t + i]);
  }
  __syncthreads();
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) {
    float acc_k = 0.0f, acc_v = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = j + r;
      acc_k += ds[r] * to_f32(head[i * ld + k]);
      acc_v += p[r] * to_f32(g0[i * s.c + k]);
    }
    T* out = dqkv + (bi * s.t + j) * ld + hi * s.d + k;
    out[s.c] = from_f32<T>(scale * acc_k);
    out[2 * s.c] = from_f32<T>(acc_v);
  }
}

// Dynamic shared memory in whole 16-byte units: ptxas may merge the last one or two float reads of a loop tail into one
// 8- or 16-byte load issued ahead of the tail's branches (reading a few bytes past the last element, harmlessly, but
// past the allocation, which compute-sanitizer reports). The padding keeps every such read inside the allocation.
size_t shared_bytes(int64_t floats) { return (static_cast<size_t>(floats) * sizeof(float) + 15) / 16 * 16; }

// Dynamic shared memory above the default 48 KiB needs an opt-in per kernel, up to the device's limit.
template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes, const device::CudaDevice& dev, const char* op) {
  if (bytes <= 48 * 1024) return;
  int limit = 0;
  TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev.index()));
  TANDEM_CHECK(bytes <= static_cast<size_t>(limit), op, ": the plain attention kernels need ", bytes,
               " bytes of shared memory per block for this sequence length; the GPU allows ", limit);
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

void check_grid(const char* op, const Dims& s) {
  TANDEM_CHECK(s.b * s.h <= 65535, op, ": ", s.b, " x ", s.h, " batch-heads exceed the plain kernels' grid");
}

}  // namespace

void attention_forward_plain(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse) {
  const char* op = "attention_forward";
  check_float(op, "qkv", qkv);
  check_dtype(op, "y", y, qkv.dtype());
  check_dtype(op, "lse", lse, DType::F32);
  const Dims s = dims_of(qkv, heads);
  if (s.b == 0 || s.t == 0 || s.d == 0) return;
  check_grid(op, s);
  device::CudaDevice& dev = cuda_device(y);
  const float scale = 1.0f / sqrtf(static_cast<float>(s.d));
  const size_t shared = shared_bytes(s.d + s.t);
  const dim3 grid(static_cast<unsigned>(s.t), static_cast<unsigned>(s.b * s.h));
  dispatch_float(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    allow_shared(plain_forward_kernel<T>, shared, dev, op);
    plain_forward_kernel<T>
        <<<grid, kAttentionThreads, shared, dev.compute_stream()>>>(qkv.data<T>(), y.data<T>(), lse.f32(), s, scale);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void attention_backward_plain(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, const Tensor& dy,
                              const Tensor& dqkv) {
  const char* op = "attention_backward";
  check_float(op, "qkv", qkv);
  for (const Tensor* t : {&y, &dy, &dqkv}) check_dtype(op, "y, dy and dqkv", *t, qkv.dtype());
  check_dtype(op, "lse", lse, DType::F32);
  const Dims s = dims_of(qkv, heads);
  if (s.b == 0 || s.t == 0 || s.d == 0) return;
  check_grid(op, s);
  device::CudaDevice& dev = cuda_device(dqkv);
  const cudaStream_t stream = dev.compute_stream();
  const float scale = 1.0f / sqrtf(static_cast<float>(s.d));
  Tensor dsum = Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "attention_backward rowsum(dO * O)");
  const dim3 grid(static_cast<unsigned>(s.t), static_cast<unsigned>(s.b * s.h));
  const size_t shared_dq = shared_bytes(2 * s.d + s.t);
  const size_t shared_dkdv = shared_bytes(2 * s.d + 2 * s.t);
  dispatch_float(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    plain_rowdot_kernel<T>
        <<<grid_for(dev, s.b * s.h * s.t), kThreads, 0, stream>>>(y.data<T>(), dy.data<T>(), dsum.f32(), s);
    TANDEM_CUDA_CHECK_LAUNCH();
    allow_shared(plain_dq_kernel<T>, shared_dq, dev, op);
    plain_dq_kernel<T><<<grid, kAttentionThreads, shared_dq, stream>>>(qkv.data<T>(), dy.data<T>(), lse.f32(),
                                                                       dsum.f32(), dqkv.data<T>(), s, scale);
    TANDEM_CUDA_CHECK_LAUNCH();
    allow_shared(plain_dkdv_kernel<T>, shared_dkdv, dev, op);
    plain_dkdv_kernel<T><<<grid, kAttentionThreads, shared_dkdv, stream>>>(qkv.data<T>(), dy.data<T>(), lse.f32(),
                                                                           dsum.f32(), dqkv.data<T>(), s, scale);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
