// A standalone check of the flash attention kernels (src/tandem/ops/cuda/attention_flash.h) on one GPU:
//   (a) correctness against an fp64 CPU reference on fresh random inputs over a grid of shapes (T, B, H / Hkv, D,
//       with and without documents, bf16 and f16), outputs poisoned with NaN before each run; it prints
//       |out - ref| / |ref| (2-norms) for y, lse, dq, dk and dv;
//   (b) determinism: forward and backward run twice on the same inputs give the same bits;
//   (c) speed on the Llama 3 8B attention shape (H 32, Hkv 8, D 128), median of 10 timed runs after a warm-up, with
//       the memory the backward needs beside cuDNN's deterministic workspace (2 B H T^2 bytes).
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -I src bench/gpu/flash_check.cu src/tandem/ops/cuda/attention_flash*.cu
// Run: ./flash_check [--no-speed] [--no-check] [--max-t N]. Exits 1 on any failure.
// Seen on an H200, 2026-12-04 (bf16, B 1, H 32, Hkv 8, D 128): forward 212-221 TFLOP/s and backward 145-168 at
// T 8192 to 131072, against PyTorch's SDPA on the same machine (MHA-expanded k, v; its default backward algorithms,
// FlashAttention-2's with an atomic dq) at T 32768: FlashAttention-2 340 / 317, cuDNN 597 / 535. Part of the
// backward's gap is the price of no atomics: q k^T and dO v^T are computed twice (for dk, dv and for dq), 7 products
// where an atomic dq needs 5.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tandem/ops/cuda/attention_flash.h"

using tandem::ops::cuda::FlashDims;

#define CHECK_CUDA(x)                                                                          \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

namespace {

// 16-bit storage <-> float on the host.
uint16_t to16(float x, bool f16) {
  if (f16) {
    __half h = __float2half_rn(x);
    return *reinterpret_cast<uint16_t*>(&h);
  }
  __nv_bfloat16 b = __float2bfloat16_rn(x);
  return *reinterpret_cast<uint16_t*>(&b);
}
double from16(uint16_t v, bool f16) {
  if (f16) return __half2float(*reinterpret_cast<__half*>(&v));
  return __bfloat162float(*reinterpret_cast<__nv_bfloat16*>(&v));
}

struct Case {
  int64_t b, t;
  int h, kv, d;
  bool docs, f16;
};

// Documents (B, T): three of ragged lengths, the boundaries differing between batch elements.
std::vector<int32_t> make_documents(int64_t b, int64_t t) {
  std::vector<int32_t> docs(b * t);
  for (int64_t bi = 0; bi < b; ++bi) {
    const int64_t cut1 = t * (2 + bi) / 7, cut2 = t * (5 + bi) / 9 + 1;
    for (int64_t i = 0; i < t; ++i) docs[bi * t + i] = static_cast<int32_t>(10 * bi + (i >= cut1) + (i >= cut2));
  }
  return docs;
}

struct Reference {
  std::vector<double> y, lse, dqkv;  // (B, T, H D), (B, H, T), (B, T, W)
};

// fp64 attention forward and backward on the rounded inputs; one thread per (batch element, kv head), which owns
// the dk and dv of that head and the dq and y of the query heads it serves.
Reference reference(const Case& c, const std::vector<double>& qkv, const std::vector<double>& dy,
                    const std::vector<int32_t>& docs) {
  const int64_t T = c.t, D = c.d, W = static_cast<int64_t>(c.h + 2 * c.kv) * D, YW = static_cast<int64_t>(c.h) * D;
  const int rep = c.h / c.kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Reference r;
  r.y.assign(c.b * T * YW, 0.0);
  r.lse.assign(c.b * c.h * T, 0.0);
  r.dqkv.assign(c.b * T * W, 0.0);
  auto work = [&](int64_t bi, int g) {
    std::vector<double> p(T), dp(T);
    for (int hr = 0; hr < rep; ++hr) {
      const int h = g * rep + hr;
      for (int64_t i = 0; i < T; ++i) {
        int64_t start = 0;
        if (c.docs)
          while (docs[bi * T + start] != docs[bi * T + i]) ++start;
        const double* q = &qkv[(bi * T + i) * W + h * D];
        double mx = -INFINITY;
        for (int64_t j = start; j <= i; ++j) {
          const double* k = &qkv[(bi * T + j) * W + (c.h + g) * D];
          double s = 0;
          for (int64_t e = 0; e < D; ++e) s += q[e] * k[e];
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = start; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        r.lse[(bi * c.h + h) * T + i] = mx + std::log(sum);
        double* yi = &r.y[(bi * T + i) * YW + h * D];
        for (int64_t j = start; j <= i; ++j) {
          p[j] /= sum;
          const double* v = &qkv[(bi * T + j) * W + (c.h + c.kv + g) * D];
          for (int64_t e = 0; e < D; ++e) yi[e] += p[j] * v[e];
        }
        // Backward: dP_ij = dO_i . v_j, D_i = dO_i . y_i, dS_ij = P_ij (dP_ij - D_i).
        const double* go = &dy[(bi * T + i) * YW + h * D];
        double di = 0;
        for (int64_t e = 0; e < D; ++e) di += go[e] * yi[e];
        double* dq = &r.dqkv[(bi * T + i) * W + h * D];
        for (int64_t j = start; j <= i; ++j) {
          const double* k = &qkv[(bi * T + j) * W + (c.h + g) * D];
          const double* v = &qkv[(bi * T + j) * W + (c.h + c.kv + g) * D];
          double dpj = 0;
          for (int64_t e = 0; e < D; ++e) dpj += go[e] * v[e];
          const double ds = p[j] * (dpj - di);
          double* dk = &r.dqkv[(bi * T + j) * W + (c.h + g) * D];
          double* dv = &r.dqkv[(bi * T + j) * W + (c.h + c.kv + g) * D];
          for (int64_t e = 0; e < D; ++e) {
            dq[e] += scale * ds * k[e];
            dk[e] += scale * ds * q[e];
            dv[e] += p[j] * go[e];
          }
        }
      }
    }
  };
  std::vector<std::thread> pool;
  const int64_t tasks = c.b * c.kv;
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(tasks, std::thread::hardware_concurrency()));
  for (int64_t w = 0; w < n; ++w)
    pool.emplace_back([&, w] {
      for (int64_t task = w; task < tasks; task += n) work(task / c.kv, static_cast<int>(task % c.kv));
    });
  for (auto& th : pool) th.join();
  return r;
}

// |a - b| / |b| over the elements where pick(index) holds (2-norms); NaN anywhere gives NaN.
template <class Pick>
double rel_err(const std::vector<double>& a, const std::vector<double>& b, Pick pick) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!pick(i)) continue;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct CaseResult {
  double y, lse, dq, dk, dv;
  bool deterministic;
};

CaseResult run_case(const Case& c, uint64_t seed) {
  const int64_t T = c.t, D = c.d, W = static_cast<int64_t>(c.h + 2 * c.kv) * D, YW = static_cast<int64_t>(c.h) * D;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> qkv16(c.b * T * W), dy16(c.b * T * YW);
  std::vector<double> qkv(qkv16.size()), dy(dy16.size());
  for (size_t i = 0; i < qkv16.size(); ++i) qkv[i] = from16(qkv16[i] = to16(normal(rng), c.f16), c.f16);
  for (size_t i = 0; i < dy16.size(); ++i) dy[i] = from16(dy16[i] = to16(normal(rng), c.f16), c.f16);
  const std::vector<int32_t> docs = make_documents(c.b, T);

  const FlashDims s{c.b, T, c.h, c.kv, c.d};
  void *d_qkv, *d_y, *d_dy, *d_dqkv, *d_dqkv2, *d_y2;
  float *d_lse, *d_lse2, *d_scratch;
  int32_t* d_docs;
  const size_t qkv_bytes = qkv16.size() * 2, y_bytes = dy16.size() * 2, lse_bytes = c.b * c.h * T * 4;
  CHECK_CUDA(cudaMalloc(&d_qkv, qkv_bytes));
  CHECK_CUDA(cudaMalloc(&d_dqkv, qkv_bytes));
  CHECK_CUDA(cudaMalloc(&d_dqkv2, qkv_bytes));
  CHECK_CUDA(cudaMalloc(&d_y, y_bytes));
  CHECK_CUDA(cudaMalloc(&d_y2, y_bytes));
  CHECK_CUDA(cudaMalloc(&d_dy, y_bytes));
  CHECK_CUDA(cudaMalloc(&d_lse, lse_bytes));
  CHECK_CUDA(cudaMalloc(&d_lse2, lse_bytes));
  CHECK_CUDA(cudaMalloc(&d_scratch, tandem::ops::cuda::flash_attention_backward_scratch_bytes(s)));
  CHECK_CUDA(cudaMalloc(&d_docs, docs.size() * 4));
  CHECK_CUDA(cudaMemcpy(d_qkv, qkv16.data(), qkv_bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_dy, dy16.data(), y_bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_docs, docs.data(), docs.size() * 4, cudaMemcpyHostToDevice));
  const int32_t* dd = c.docs ? d_docs : nullptr;
  // Poison: all-ones bits are NaN in f32, bf16 and f16, so anything left unwritten shows.
  for (void* p : {d_y, d_y2}) CHECK_CUDA(cudaMemset(p, 0xff, y_bytes));
  for (void* p : {d_dqkv, d_dqkv2}) CHECK_CUDA(cudaMemset(p, 0xff, qkv_bytes));
  for (void* p : {static_cast<void*>(d_lse), static_cast<void*>(d_lse2), static_cast<void*>(d_scratch)})
    CHECK_CUDA(cudaMemset(p, 0xff, lse_bytes));

  CHECK_CUDA(tandem::ops::cuda::flash_attention_forward(s, d_qkv, d_y, d_lse, dd, c.f16, 0));
  CHECK_CUDA(tandem::ops::cuda::flash_attention_backward(s, d_qkv, d_y, d_lse, d_dy, d_dqkv, d_scratch, dd, c.f16, 0));
  CHECK_CUDA(tandem::ops::cuda::flash_attention_forward(s, d_qkv, d_y2, d_lse2, dd, c.f16, 0));
  CHECK_CUDA(cudaMemset(d_scratch, 0xff, lse_bytes));
  CHECK_CUDA(
      tandem::ops::cuda::flash_attention_backward(s, d_qkv, d_y2, d_lse2, d_dy, d_dqkv2, d_scratch, dd, c.f16, 0));
  CHECK_CUDA(cudaDeviceSynchronize());

  std::vector<uint16_t> y16(dy16.size()), y16b(dy16.size()), dq16(qkv16.size()), dq16b(qkv16.size());
  std::vector<float> lse32(c.b * c.h * T), lse32b(lse32.size());
  CHECK_CUDA(cudaMemcpy(y16.data(), d_y, y_bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(y16b.data(), d_y2, y_bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(dq16.data(), d_dqkv, qkv_bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(dq16b.data(), d_dqkv2, qkv_bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(lse32.data(), d_lse, lse_bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(lse32b.data(), d_lse2, lse_bytes, cudaMemcpyDeviceToHost));
  for (void* p : {d_qkv, d_y, d_y2, d_dy, d_dqkv, d_dqkv2, static_cast<void*>(d_lse), static_cast<void*>(d_lse2),
                  static_cast<void*>(d_scratch), static_cast<void*>(d_docs)})
    CHECK_CUDA(cudaFree(p));

  CaseResult res{};
  res.deterministic = y16 == y16b && dq16 == dq16b && std::memcmp(lse32.data(), lse32b.data(), lse_bytes) == 0;
  const Reference ref = reference(c, qkv, dy, docs);
  std::vector<double> y(y16.size()), dq(dq16.size()), lse(lse32.begin(), lse32.end());
  for (size_t i = 0; i < y.size(); ++i) y[i] = from16(y16[i], c.f16);
  for (size_t i = 0; i < dq.size(); ++i) dq[i] = from16(dq16[i], c.f16);
  auto all = [](size_t) { return true; };
  res.y = rel_err(y, ref.y, all);
  res.lse = rel_err(lse, ref.lse, all);
  const int64_t kcol = static_cast<int64_t>(c.h) * D, vcol = static_cast<int64_t>(c.h + c.kv) * D;
  res.dq = rel_err(dq, ref.dqkv, [&](size_t i) { return static_cast<int64_t>(i % W) < kcol; });
  res.dk = rel_err(dq, ref.dqkv, [&](size_t i) {
    const int64_t col = static_cast<int64_t>(i % W);
    return col >= kcol && col < vcol;
  });
  res.dv = rel_err(dq, ref.dqkv, [&](size_t i) { return static_cast<int64_t>(i % W) >= vcol; });
  return res;
}

// Fills 16-bit data on the device with a hash of the index mapped to about N(0, 1)'s spread (uniform, |x| < 1.7).
__global__ void fill_kernel(uint16_t* p, int64_t n, uint64_t seed, bool f16) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f) * 3.4f - 1.7f;
    if (f16) {
      __half h = __float2half_rn(u);
      p[i] = *reinterpret_cast<uint16_t*>(&h);
    } else {
      __nv_bfloat16 b = __float2bfloat16_rn(u);
      p[i] = *reinterpret_cast<uint16_t*>(&b);
    }
  }
}

struct Speed {
  int64_t b, t;
  double fwd_ms, bwd_ms, fwd_tflops, bwd_tflops, scratch_mib, cudnn_gib, total_gib;
};

template <class F>
double median_ms(F&& f, int reps) {
  cudaEvent_t a, z;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&z));
  f();  // warm-up
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(a));
    f();
    CHECK_CUDA(cudaEventRecord(z));
    CHECK_CUDA(cudaEventSynchronize(z));
    float m = 0;
    CHECK_CUDA(cudaEventElapsedTime(&m, a, z));
    ms.push_back(m);
  }
  std::sort(ms.begin(), ms.end());
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(z));
  return ms[ms.size() / 2];
}

Speed time_shape(int64_t b, int64_t t) {
  const FlashDims s{b, t, 32, 8, 128};
  const int64_t W = (32 + 16) * 128, YW = 32 * 128;
  const size_t qkv_bytes = b * t * W * 2, y_bytes = b * t * YW * 2, lse_bytes = b * 32 * t * 4;
  const size_t scratch = tandem::ops::cuda::flash_attention_backward_scratch_bytes(s);
  void *qkv, *y, *dy, *dqkv;
  float *lse, *ws;
  CHECK_CUDA(cudaMalloc(&qkv, qkv_bytes));
  CHECK_CUDA(cudaMalloc(&dqkv, qkv_bytes));
  CHECK_CUDA(cudaMalloc(&y, y_bytes));
  CHECK_CUDA(cudaMalloc(&dy, y_bytes));
  CHECK_CUDA(cudaMalloc(&lse, lse_bytes));
  CHECK_CUDA(cudaMalloc(&ws, scratch));
  fill_kernel<<<1024, 256>>>(static_cast<uint16_t*>(qkv), b * t * W, 1, false);
  fill_kernel<<<1024, 256>>>(static_cast<uint16_t*>(dy), b * t * YW, 2, false);
  CHECK_CUDA(cudaGetLastError());
  Speed r{b, t};
  r.fwd_ms =
      median_ms([&] { CHECK_CUDA(tandem::ops::cuda::flash_attention_forward(s, qkv, y, lse, nullptr, false, 0)); }, 10);
  r.bwd_ms = median_ms(
      [&] { CHECK_CUDA(tandem::ops::cuda::flash_attention_backward(s, qkv, y, lse, dy, dqkv, ws, nullptr, false, 0)); },
      10);
  const double fwd_flops = 2.0 * 2.0 * b * 32 * static_cast<double>(t) * t * 128 / 2;
  r.fwd_tflops = fwd_flops / (r.fwd_ms * 1e-3) / 1e12;
  r.bwd_tflops = 2.5 * fwd_flops / (r.bwd_ms * 1e-3) / 1e12;
  r.scratch_mib = scratch / 1048576.0;
  r.cudnn_gib = 2.0 * b * 32 * static_cast<double>(t) * t / 1073741824.0;
  // What the backward touches: qkv, y, dy, lse, dqkv and its scratch.
  r.total_gib = (2.0 * qkv_bytes + 2.0 * y_bytes + lse_bytes + scratch) / 1073741824.0;
  for (void* p : {qkv, y, dy, dqkv, static_cast<void*>(lse), static_cast<void*>(ws)}) CHECK_CUDA(cudaFree(p));
  std::printf("speed B %lld T %lld: forward %.3f ms %.1f TFLOP/s, backward %.3f ms %.1f TFLOP/s\n",
              static_cast<long long>(b), static_cast<long long>(t), r.fwd_ms, r.fwd_tflops, r.bwd_ms, r.bwd_tflops);
  std::fflush(stdout);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool speed = true, check = true;
  int64_t max_t = 1 << 30;  // --max-t N: check shapes up to T = N only (a quick pass, e.g. under compute-sanitizer)
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--no-speed") speed = false;
    if (std::string(argv[i]) == "--no-check") check = false;
    if (std::string(argv[i]) == "--max-t" && i + 1 < argc) max_t = std::atoll(argv[++i]);
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);

  bool ok = true;
  double worst[2][5] = {};  // [f16][y, lse, dq, dk, dv]
  int cases = 0, nondet = 0;
  if (check) {
    const int64_t ts[] = {1, 17, 128, 300, 1024};
    const int heads[][2] = {{4, 4}, {8, 2}, {32, 8}};
    const int ds[] = {64, 128};
    uint64_t seed = 12345;
    std::printf("%-5s %-5s %-3s %-3s %-4s %-3s %-4s %-9s %-9s %-9s %-9s %-9s %s\n", "T", "B", "H", "Hkv", "D", "doc",
                "type", "y", "lse", "dq", "dk", "dv", "bits");
    for (int ti = 0; ti < 5 && ts[ti] <= max_t; ++ti)
      for (int hi = 0; hi < 3; ++hi)
        for (int di = 0; di < 2; ++di)
          for (int doc = 0; doc < 2; ++doc) {
            const Case c{(ti + hi) % 2 == 0 ? 1 : 2,   ts[ti], heads[hi][0], heads[hi][1], ds[di], doc == 1,
                         (hi + di + doc + ti) % 2 == 1};
            const CaseResult r = run_case(c, seed++);
            const double tol = c.f16 ? 5e-3 : 1e-2;
            const double e[5] = {r.y, r.lse, r.dq, r.dk, r.dv};
            bool pass = r.deterministic;
            for (int k = 0; k < 5; ++k) {
              pass = pass && e[k] <= tol;  // NaN fails
              worst[c.f16][k] = std::isnan(e[k]) ? e[k] : std::max(worst[c.f16][k], e[k]);
            }
            ++cases;
            nondet += !r.deterministic;
            ok = ok && pass;
            std::printf("%-5lld %-5lld %-3d %-3d %-4d %-3s %-4s %-9.2e %-9.2e %-9.2e %-9.2e %-9.2e %s%s\n",
                        static_cast<long long>(c.t), static_cast<long long>(c.b), c.h, c.kv, c.d, c.docs ? "yes" : "no",
                        c.f16 ? "f16" : "bf16", r.y, r.lse, r.dq, r.dk, r.dv, r.deterministic ? "same" : "DIFFER",
                        pass ? "" : "  FAIL");
            std::fflush(stdout);
          }
  }

  std::vector<Speed> speeds;
  if (speed) {
    const int64_t shapes[][2] = {{1, 2048}, {16, 2048}, {1, 8192}, {1, 32768}, {1, 131072}};
    for (const auto& sh : shapes) speeds.push_back(time_shape(sh[0], sh[1]));
  }

  std::printf("\n==== flash attention check (%s) ====\n", prop.name);
  if (check) {
    std::printf("correctness: %d cases, worst |out - ref| / |ref| (tolerance bf16 1e-2, f16 5e-3)\n", cases);
    std::printf("  %-5s %-9s %-9s %-9s %-9s %-9s\n", "type", "y", "lse", "dq", "dk", "dv");
    for (int f = 0; f < 2; ++f)
      std::printf("  %-5s %-9.2e %-9.2e %-9.2e %-9.2e %-9.2e\n", f ? "f16" : "bf16", worst[f][0], worst[f][1],
                  worst[f][2], worst[f][3], worst[f][4]);
    std::printf("determinism: %d of %d cases gave the same bits twice\n", cases - nondet, cases);
  }
  if (speed) {
    std::printf("speed, bf16, H 32, Hkv 8, D 128, causal (median of 10):\n");
    std::printf("  %-3s %-7s %-10s %-8s %-10s %-8s %-12s %-12s %s\n", "B", "T", "fwd ms", "TFLOP/s", "bwd ms",
                "TFLOP/s", "bwd scratch", "bwd total", "cuDNN det. workspace");
    for (const Speed& r : speeds)
      std::printf("  %-3lld %-7lld %-10.3f %-8.1f %-10.3f %-8.1f %-8.2f MiB %-8.2f GiB %.1f GiB\n",
                  static_cast<long long>(r.b), static_cast<long long>(r.t), r.fwd_ms, r.fwd_tflops, r.bwd_ms,
                  r.bwd_tflops, r.scratch_mib, r.total_gib, r.cudnn_gib);
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
