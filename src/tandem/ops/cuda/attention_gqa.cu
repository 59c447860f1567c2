// The plain CUDA grouped-query attention kernels (see attention_gqa_plain.h): causal attention with fp32 math for any
// float dtype, query head h reading kv head h / (H / Hkv). Forward: one block per (query row, batch-query head)
// computes the row's scores into shared memory, its log-sum-exp and the weighted sum of v. Backward recomputes the
// probabilities from lse: one block per (query row, batch-query head) for dq, one per (key row, batch-kv head) for dk
// and dv, which walks the query heads of its group in order; every sum has a fixed order (no atomics).
// Layouts: qkv and dqkv (B, T, W), W = (H + 2 Hkv) D, query head h at column h*D, kv head g at H*D + g*D (k) and
// (H + Hkv) D + g*D (v); y and dy (B, T, H*D); lse (B, H, T).
#include "tandem/ops/cuda/attention_gqa_plain.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/cuda/scratch_sizes.h"

namespace tandem::ops::cuda {
namespace {

constexpr int kAttentionThreads = 128;

struct GqaDims {
  int64_t b, t;
  int h, kv, d;
  int64_t width;  // W = (H + 2 Hkv) D
  __host__ __device__ int rep() const { return h / kv; }
  __host__ __device__ int64_t q_col(int64_t hi) const { return hi * d; }
  __host__ __device__ int64_t k_col(int64_t g) const { return (h + g) * d; }
  __host__ __device__ int64_t v_col(int64_t g) const { return (h + kv + g) * d; }
  __host__ __device__ int64_t y_width() const { return static_cast<int64_t>(h) * d; }
};

GqaDims dims_of(const Tensor& qkv, int heads, int kv_heads) {
  const int64_t width = qkv.dim(2);
  const int64_t d = width / (heads + 2 * static_cast<int64_t>(kv_heads));
  return GqaDims{qkv.dim(0), qkv.dim(1), heads, kv_heads, static_cast<int>(d), width};
}

template <class T>
__global__ void gqa_forward_kernel(const T* __restrict__ qkv, T* __restrict__ y, float* __restrict__ lse, GqaDims s,
                                   float scale) {
  extern __shared__ float smem[];
  __shared__ float red[32];
  float* q = smem;        // (D) this query row
  float* p = smem + s.d;  // (T) scores of keys 0..i, then their exp
  const int64_t i = blockIdx.x, bh = blockIdx.y;
  const int64_t bi = bh / s.h, hi = bh % s.h, g = hi / s.rep();
  const int64_t ld = s.width;
  const T* rows = qkv + bi * s.t * ld;  // row 0 of this batch element
  const T* kcols = rows + s.k_col(g);   // this kv head's k in row 0, rows ld apart
  const T* vcols = rows + s.v_col(g);   // and its v
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) q[k] = to_f32(rows[i * ld + s.q_col(hi) + k]);
  __syncthreads();
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const T* kj = kcols + j * ld;  // (D)
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
    float acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j) acc += p[j] * to_f32(vcols[j * ld + k]);
    y[(bi * s.t + i) * s.y_width() + hi * s.d + k] = from_f32<T>(acc * inv);
  }
  if (threadIdx.x == 0) lse[bh * s.t + i] = mx + logf(sum);
}

// dsum (B, H, T) = rowsum(dO * O) per query head: D_i = sum_j P_ij dP_ij, since O = P V.
template <class T>
__global__ void gqa_rowdot_kernel(const T* __restrict__ y, const T* __restrict__ dy, float* __restrict__ dsum,
                                  GqaDims s) {
  const int64_t total = s.b * s.h * s.t;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t bh = e / s.t, i = e - bh * s.t;
    const int64_t off = ((bh / s.h) * s.t + i) * s.y_width() + (bh % s.h) * s.d;
    float acc = 0.0f;
    for (int k = 0; k < s.d; ++k) acc += to_f32(dy[off + k]) * to_f32(y[off + k]);
    dsum[e] = acc;
  }
}

// dq_i = scale sum_{j <= i} dS_ij k_j, with dS_ij = P_ij (dO_i . v_j - D_i) and P_ij = exp(scale q_i . k_j - lse_i).
template <class T>
__global__ void gqa_dq_kernel(const T* __restrict__ qkv, const T* __restrict__ dy, const float* __restrict__ lse,
                              const float* __restrict__ dsum, T* __restrict__ dqkv, GqaDims s, float scale) {
  extern __shared__ float smem[];
  float* q = smem;             // (D) q_i
  float* g = smem + s.d;       // (D) dO_i
  float* ds = smem + 2 * s.d;  // (T) dS_ij for j <= i
  const int64_t i = blockIdx.x, bh = blockIdx.y;
  const int64_t bi = bh / s.h, hi = bh % s.h, g_kv = hi / s.rep();
  const int64_t ld = s.width;
  const T* rows = qkv + bi * s.t * ld;
  const T* kcols = rows + s.k_col(g_kv);
  const T* vcols = rows + s.v_col(g_kv);
  const T* go = dy + (bi * s.t + i) * s.y_width() + hi * s.d;
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) {
    q[k] = to_f32(rows[i * ld + s.q_col(hi) + k]);
    g[k] = to_f32(go[k]);
  }
  __syncthreads();
  const float l = lse[bh * s.t + i], dd = dsum[bh * s.t + i];
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const T* kj = kcols + j * ld;  // (D)
    const T* vj = vcols + j * ld;  // (D)
    float qk = 0.0f, gv = 0.0f;
    for (int k = 0; k < s.d; ++k) {
      qk += q[k] * to_f32(kj[k]);
      gv += g[k] * to_f32(vj[k]);
    }
    ds[j] = expf(qk * scale - l) * (gv - dd);
  }
  __syncthreads();
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j) acc += ds[j] * to_f32(kcols[j * ld + k]);
    dqkv[(bi * s.t + i) * ld + s.q_col(hi) + k] = from_f32<T>(scale * acc);
  }
}

// For key row j of kv head g: dk_j = scale sum_h sum_{i >= j} dS^h_ij q^h_i and dv_j = sum_h sum_{i >= j} P^h_ij dO^h_i
// over the query heads h of the group, in head order; each column's sums live in shared memory, owned by one thread.
template <class T>
__global__ void gqa_dkdv_kernel(const T* __restrict__ qkv, const T* __restrict__ dy, const float* __restrict__ lse,
                                const float* __restrict__ dsum, T* __restrict__ dqkv, GqaDims s, float scale) {
  extern __shared__ float smem[];
  const int64_t j = blockIdx.x, bg = blockIdx.y;
  const int64_t rows_below = s.t - j;  // queries i = j .. T-1 see key j
  float* kv = smem;                    // (2D) k_j, then v_j
  float* acc = smem + 2 * s.d;         // (2D) dk_j, then dv_j, summed over the group
  float* p = smem + 4 * s.d;           // (T - j) P_ij of one query head
  float* ds = p + rows_below;          // (T - j) dS_ij of one query head
  const int64_t bi = bg / s.kv, g = bg % s.kv;
  const int64_t ld = s.width, ldy = s.y_width();
  const T* rows = qkv + bi * s.t * ld;
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) {
    kv[k] = to_f32(rows[j * ld + s.k_col(g) + k]);
    kv[s.d + k] = to_f32(rows[j * ld + s.v_col(g) + k]);
    acc[k] = 0.0f;
    acc[s.d + k] = 0.0f;
  }
  __syncthreads();
  for (int r = 0; r < s.rep(); ++r) {
    const int64_t hi = g * s.rep() + r;
    const int64_t bh = bi * s.h + hi;
    const T* qcols = rows + s.q_col(hi);           // this query head's q in row 0, rows ld apart
    const T* g0 = dy + bi * s.t * ldy + hi * s.d;  // its dO in row 0, rows H*D apart
    for (int64_t rr = threadIdx.x; rr < rows_below; rr += blockDim.x) {
      const int64_t i = j + rr;
      const T* qi = qcols + i * ld;  // (D)
      const T* gi = g0 + i * ldy;    // (D)
      float qk = 0.0f, gv = 0.0f;
      for (int k = 0; k < s.d; ++k) {
        qk += to_f32(qi[k]) * kv[k];
        gv += to_f32(gi[k]) * kv[s.d + k];
      }
      const float pij = expf(qk * scale - lse[bh * s.t + i]);
      p[rr] = pij;
      ds[rr] = pij * (gv - dsum[bh * s.t + i]);
    }
    __syncthreads();
    for (int k = threadIdx.x; k < s.d; k += blockDim.x) {
      float acc_k = 0.0f, acc_v = 0.0f;
      for (int64_t rr = 0; rr < rows_below; ++rr) {
        const int64_t i = j + rr;
        acc_k += ds[rr] * to_f32(qcols[i * ld + k]);
        acc_v += p[rr] * to_f32(g0[i * ldy + k]);
      }
      acc[k] += acc_k;
      acc[s.d + k] += acc_v;
    }
    __syncthreads();  // p and ds are rewritten by the next head
  }
  for (int k = threadIdx.x; k < s.d; k += blockDim.x) {
    T* out = dqkv + (bi * s.t + j) * ld;
    out[s.k_col(g) + k] = from_f32<T>(scale * acc[k]);
    out[s.v_col(g) + k] = from_f32<T>(acc[s.d + k]);
  }
}

// Dynamic shared memory in whole 16-byte units (see attention.cu: ptxas may read a few bytes past a loop's last float).
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

void check_grid(const char* op, const GqaDims& s) {
  TANDEM_CHECK(s.b * s.h <= 65535, op, ": ", s.b, " x ", s.h, " batch-heads exceed the plain kernels' grid");
  TANDEM_CHECK(s.t <= 0x7fffffff, op, ": ", s.t, " positions exceed the plain kernels' grid");
}

}  // namespace

void attention_gqa_forward_plain(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse) {
  const char* op = "attention_gqa_forward";
  check_float(op, "qkv", qkv);
  check_dtype(op, "y", y, qkv.dtype());
  check_dtype(op, "lse", lse, DType::F32);
  const GqaDims s = dims_of(qkv, heads, kv_heads);
  if (s.b == 0 || s.t == 0 || s.d == 0) return;
  check_grid(op, s);
  device::CudaDevice& dev = cuda_device(y);
  const float scale = 1.0f / sqrtf(static_cast<float>(s.d));
  const size_t shared = shared_bytes(s.d + s.t);
  const dim3 grid(static_cast<unsigned>(s.t), static_cast<unsigned>(s.b * s.h));
  dispatch_float(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    allow_shared(gqa_forward_kernel<T>, shared, dev, op);
    gqa_forward_kernel<T>
        <<<grid, kAttentionThreads, shared, dev.compute_stream()>>>(qkv.data<T>(), y.data<T>(), lse.f32(), s, scale);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void attention_gqa_backward_plain(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                                  const Tensor& dy, const Tensor& dqkv) {
  const char* op = "attention_gqa_backward";
  check_float(op, "qkv", qkv);
  for (const Tensor* t : {&y, &dy, &dqkv}) check_dtype(op, "y, dy and dqkv", *t, qkv.dtype());
  check_dtype(op, "lse", lse, DType::F32);
  const GqaDims s = dims_of(qkv, heads, kv_heads);
  if (s.b == 0 || s.t == 0 || s.d == 0) return;
  check_grid(op, s);
  device::CudaDevice& dev = cuda_device(dqkv);
  const cudaStream_t stream = dev.compute_stream();
  const float scale = 1.0f / sqrtf(static_cast<float>(s.d));
  Tensor dsum = Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "attention_gqa_backward rowsum(dO * O)");
  TANDEM_CHECK(static_cast<int64_t>(dsum.nbytes()) == attention_gqa_backward_scratch_bytes(s.b, s.h, s.t), op,
               ": scratch size differs from the planner's (scratch_sizes.h)");
  const dim3 grid_q(static_cast<unsigned>(s.t), static_cast<unsigned>(s.b * s.h));
  const dim3 grid_kv(static_cast<unsigned>(s.t), static_cast<unsigned>(s.b * s.kv));
  const size_t shared_dq = shared_bytes(2 * s.d + s.t);
  const size_t shared_dkdv = shared_bytes(4 * s.d + 2 * s.t);
  dispatch_float(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    gqa_rowdot_kernel<T>
        <<<grid_for(dev, s.b * s.h * s.t), kThreads, 0, stream>>>(y.data<T>(), dy.data<T>(), dsum.f32(), s);
    TANDEM_CUDA_CHECK_LAUNCH();
    allow_shared(gqa_dq_kernel<T>, shared_dq, dev, op);
    gqa_dq_kernel<T><<<grid_q, kAttentionThreads, shared_dq, stream>>>(qkv.data<T>(), dy.data<T>(), lse.f32(),
                                                                       dsum.f32(), dqkv.data<T>(), s, scale);
    TANDEM_CUDA_CHECK_LAUNCH();
    allow_shared(gqa_dkdv_kernel<T>, shared_dkdv, dev, op);
    gqa_dkdv_kernel<T><<<grid_kv, kAttentionThreads, shared_dkdv, stream>>>(qkv.data<T>(), dy.data<T>(), lse.f32(),
                                                                            dsum.f32(), dqkv.data<T>(), s, scale);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
