// gemm_sweep: what cuBLASLt's candidate algorithms and epilogues do at the gpt's linear-layer shapes, to aim GEMM
// work at measured figures. For each model width d (tokens per micro-batch N) and each of the block's four linears
// (qkv d -> 3d, attention proj d -> d, fc d -> 4d, mlp proj 4d -> d) it times, in bf16 with fp32 accumulation:
//   fwd    y (N, out) = x (N, in) W^T, with no epilogue, with the bias epilogue, and for fc with GELU_AUX_BIAS
//          (y = gelu(x W^T + b), the pre-activation kept as the aux output);
//   dx     dx (N, in) = dy (N, out) W, with no epilogue, and for the mlp proj with DGELU_BGRAD (dx times gelu' of
//          fc's pre-activation, and fc's bias gradient);
//   dw     dW (out, in) f32 += dy^T x, with no epilogue and with BGRADB (the bias gradient).
// Every candidate the heuristic returns (up to --candidates) is timed: the median of 10 runs after 3 warm-ups. A row
// gives the heuristic's first choice and the fastest candidate, in ms and TFLOP/s, with their tile and split-K.
// It also says whether the candidates' outputs (with BGRADB's bias gradient) are the same bits as the first's (split-K
// and the others apart), and checks which GELU cuBLASLt's epilogue computes (tanh approximation or erf) against its own
// aux output.
// Usage: gemm_sweep [--dims 1600,2048,4096] [--tokens 8192,8192,4096] [--candidates 16]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/device/cuda/cuda_check.h"
#include "tandem/ops/cuda/workspace.h"

namespace {

constexpr size_t kWorkspaceBytes = static_cast<size_t>(tandem::ops::cuda::kGemmWorkspaceBytes);  // the engine's

// A device buffer of n bf16 values drawn from N(0, scale^2), or n f32 zeros.
void* random_bf16(int64_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> host(static_cast<size_t>(n));
  for (auto& v : host) v = tandem::f32_to_bf16(dist(rng));
  void* p = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&p, host.size() * 2));
  TANDEM_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  return p;
}
void* zeros(int64_t bytes) {
  void* p = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(bytes)));
  TANDEM_CUDA_CHECK(cudaMemset(p, 0, static_cast<size_t>(bytes)));
  return p;
}

// One column-major product D (m, n) = op(A) op(B) + beta C as cuBLASLt sees it, with its epilogue's pointers.
struct Problem {
  int64_t m, n, k;
  cublasOperation_t op_a, op_b;
  int64_t ld_a, ld_b, ld_c;
  cudaDataType_t c_type;
  float beta;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  void* bias = nullptr;                    // BIAS: bf16 (m); BGRADB: f32 (n); DGELU_BGRAD: bias_type (m)
  cudaDataType_t bias_type = CUDA_R_16BF;  // DGELU_BGRAD's bias gradient
  void* aux = nullptr;                     // GELU_AUX_BIAS / DGELU_BGRAD: bf16 (m, n), ld m
};

struct Candidate {
  cublasLtMatmulAlgo_t algo;
  float ms = 0;
};

std::string algo_text(const cublasLtMatmulAlgo_t& algo) {
  int id = 0, tile = 0, splitk = 0, stages = 0, reduction = 0;
  size_t got = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &got);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &got);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &got);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof reduction,
                                       &got);
  char buf[96];
  std::snprintf(buf, sizeof buf, "algo %d tile %d stages %d splitK %d red %d", id, tile, stages, splitk, reduction);
  return buf;
}

int splitk_of(const cublasLtMatmulAlgo_t& algo) {
  int splitk = 0;
  size_t got = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &got);
  return splitk;
}

// FNV-1a over the 64-bit words of a device buffer (its byte count a multiple of 8).
uint64_t checksum(const void* p, int64_t bytes) {
  std::vector<uint64_t> host(static_cast<size_t>(bytes / 8));
  TANDEM_CUDA_CHECK(cudaMemcpy(host.data(), p, host.size() * 8, cudaMemcpyDeviceToHost));
  uint64_t h = 1469598103934665603ull;
  for (uint64_t w : host) h = (h ^ w) * 1099511628211ull;
  return h;
}

struct Sweep {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  cudaStream_t stream = nullptr;
  int candidates = 16;
};

// Times every candidate of the problem; returns them in the heuristic's order (ms 0: it failed to run).
std::vector<Candidate> time_candidates(const Sweep& s, const Problem& p, const char* name, double flops) {
  cublasLtMatmulDesc_t op;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &p.op_a, sizeof p.op_a));
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &p.op_b, sizeof p.op_b));
  if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    TANDEM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof p.epilogue));
    TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias));
    if (p.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
      TANDEM_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &p.bias_type, sizeof p.bias_type));
    }
    if (p.aux) {
      TANDEM_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof p.aux));
      const int64_t ld = p.m;
      TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
  }
  cublasLtMatrixLayout_t la, lb, lc;
  const bool ta = p.op_a == CUBLAS_OP_T, tb = p.op_b == CUBLAS_OP_T;
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? p.k : p.m, ta ? p.m : p.k, p.ld_a));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? p.n : p.k, tb ? p.k : p.n, p.ld_b));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, p.c_type, p.m, p.n, p.ld_c));
  cublasLtMatmulPreference_t pref;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  TANDEM_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(s.candidates));
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(s.handle, op, la, lb, lc, lc, pref, s.candidates, results.data(), &found);
  std::vector<Candidate> out;
  uint64_t first_bits = 0;
  int differ_plain = 0, differ_split = 0;  // candidates whose output bits differ from the first's
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    std::printf("%-34s no algorithm (%s)\n", name, cublasLtGetStatusString(hs));
  }
  const float alpha = 1.0f;
  cudaEvent_t start, stop;
  TANDEM_CUDA_CHECK(cudaEventCreate(&start));
  TANDEM_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < found; ++i) {
    Candidate cand{results[static_cast<size_t>(i)].algo, 0.0f};
    auto launch = [&] {
      return cublasLtMatmul(s.handle, op, &alpha, p.a, la, p.b, lb, &p.beta, p.c, lc, p.c, lc, &cand.algo, s.workspace,
                            kWorkspaceBytes, s.stream);
    };
    bool ok = true;
    for (int w = 0; w < 3 && ok; ++w) ok = launch() == CUBLAS_STATUS_SUCCESS;
    std::vector<float> ms;
    for (int r = 0; r < 10 && ok; ++r) {
      TANDEM_CUDA_CHECK(cudaEventRecord(start, s.stream));
      ok = launch() == CUBLAS_STATUS_SUCCESS;
      TANDEM_CUDA_CHECK(cudaEventRecord(stop, s.stream));
      TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
      float t = 0;
      TANDEM_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
    }
    if (ok) {
      std::sort(ms.begin(), ms.end());
      cand.ms = (ms[4] + ms[5]) / 2;
      // The bits of one run from a zeroed output: the same for every candidate, or not.
      TANDEM_CUDA_CHECK(
          cudaMemsetAsync(p.c, 0, static_cast<size_t>(p.m * p.n * (p.c_type == CUDA_R_32F ? 4 : 2)), s.stream));
      ok = launch() == CUBLAS_STATUS_SUCCESS;
      uint64_t h = checksum(p.c, p.m * p.n * (p.c_type == CUDA_R_32F ? 4 : 2));
      if (p.epilogue == CUBLASLT_EPILOGUE_BGRADB) h ^= checksum(p.bias, p.n * 4) * 31;  // its f32 bias gradient too
      if (out.empty() || out[0].ms == 0) {
        first_bits = h;
      } else if (h != first_bits) {
        const int splitk = splitk_of(cand.algo);
        (splitk > 1 ? differ_split : differ_plain) += 1;
      }
    }
    out.push_back(cand);
  }
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  if (!out.empty()) {
    int best = -1;
    for (int i = 0; i < static_cast<int>(out.size()); ++i)
      if (out[i].ms > 0 && (best < 0 || out[i].ms < out[best].ms)) best = i;
    auto tf = [&](float ms) { return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0; };
    std::printf("%-34s first %8.3f ms %6.1f TFLOP/s [%s] | best #%d of %d %8.3f ms %6.1f [%s]\n", name, out[0].ms,
                tf(out[0].ms), algo_text(out[0].algo).c_str(), best, found, best >= 0 ? out[best].ms : 0.0f,
                best >= 0 ? tf(out[best].ms) : 0.0, best >= 0 ? algo_text(out[best].algo).c_str() : "-");
    std::printf("%-34s output bits against the first: %d without split-K differ, %d with split-K differ\n", "",
                differ_plain, differ_split);
    std::fflush(stdout);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  return out;
}

// Which GELU the epilogue applies: its output against the tanh and erf forms of its own aux (pre-activation).
void report_gelu(const void* y, const void* aux, int64_t count) {
  std::vector<uint16_t> hy(static_cast<size_t>(count)), ha(static_cast<size_t>(count));
  TANDEM_CUDA_CHECK(cudaMemcpy(hy.data(), y, hy.size() * 2, cudaMemcpyDeviceToHost));
  TANDEM_CUDA_CHECK(cudaMemcpy(ha.data(), aux, ha.size() * 2, cudaMemcpyDeviceToHost));
  double tanh_err = 0, erf_err = 0, scale = 0;
  for (size_t i = 0; i < hy.size(); ++i) {
    const double v = tandem::bf16_to_f32(ha[i]), out = tandem::bf16_to_f32(hy[i]);
    const double t = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    const double e = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    tanh_err = std::max(tanh_err, std::fabs(out - t));
    erf_err = std::max(erf_err, std::fabs(out - e));
    scale = std::max(scale, std::fabs(out));
  }
  std::printf("GELU_AUX_BIAS output against gelu(aux): max |diff| tanh form %.3g, erf form %.3g (max |y| %.3g)\n",
              tanh_err, erf_err, scale);
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return v;
}

void sweep_width(const Sweep& s, int64_t d, int64_t tokens, std::mt19937& rng) {
  std::printf("\nd %lld, N %lld tokens\n", static_cast<long long>(d), static_cast<long long>(tokens));
  struct Linear {
    const char* name;
    int64_t in, out;
  };
  const Linear linears[] = {{"qkv", d, 3 * d}, {"proj", d, d}, {"fc", d, 4 * d}, {"mlp_proj", 4 * d, d}};
  const int64_t N = tokens;
  void* fc_preact = nullptr;              // fc's GELU_AUX_BIAS aux, (N, 4d) row-major: the mlp proj's DGELU_BGRAD input
  void* fc_bias_grad = zeros(4 * d * 4);  // f32 or bf16
  for (const Linear& l : linears) {
    void* x = random_bf16(N * l.in, 1.0f, rng);
    void* w = random_bf16(l.out * l.in, 0.02f, rng);
    void* dy = random_bf16(N * l.out, 0.01f, rng);
    void* y = zeros(N * l.out * 2);
    void* dx = zeros(N * l.in * 2);
    void* dw = zeros(l.out * l.in * 4);
    void* bias = random_bf16(l.out, 0.1f, rng);
    void* bias_grad = zeros(l.out * 4);
    const double flops = 2.0 * N * l.in * l.out;
    auto label = [&](const char* what) { return std::string(l.name) + " " + what; };
    // Row-major y (N, out) = x W^T is column-major y^T (out, N) = W (out, in)^T... with cuBLASLt's A = W (op T).
    Problem fwd{l.out, N, l.in, CUBLAS_OP_T, CUBLAS_OP_N, l.in, l.in, l.out, CUDA_R_16BF, 0.0f};
    fwd.a = w;
    fwd.b = x;
    fwd.c = y;
    time_candidates(s, fwd, label("fwd").c_str(), flops);
    Problem fwd_bias = fwd;
    fwd_bias.epilogue = CUBLASLT_EPILOGUE_BIAS;
    fwd_bias.bias = bias;
    time_candidates(s, fwd_bias, label("fwd bias").c_str(), flops);
    if (std::string(l.name) == "fc") {
      fc_preact = zeros(N * l.out * 2);
      Problem gelu = fwd_bias;
      gelu.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
      gelu.aux = fc_preact;
      time_candidates(s, gelu, label("fwd gelu_aux_bias").c_str(), flops);
      report_gelu(y, fc_preact, std::min<int64_t>(N * l.out, 1 << 22));
    }
    // Row-major dx (N, in) = dy (N, out) W (out, in): column-major dx^T (in, N) = W^T... A = W (op N, ld in).
    Problem bwd{l.in, N, l.out, CUBLAS_OP_N, CUBLAS_OP_N, l.in, l.out, l.in, CUDA_R_16BF, 0.0f};
    bwd.a = w;
    bwd.b = dy;
    bwd.c = dx;
    time_candidates(s, bwd, label("dx").c_str(), flops);
    if (std::string(l.name) == "mlp_proj" && fc_preact) {
      Problem dgelu = bwd;
      dgelu.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
      dgelu.aux = fc_preact;
      dgelu.bias = fc_bias_grad;
      time_candidates(s, dgelu, label("dx dgelu_bgrad bf16 bias").c_str(), flops);
      dgelu.bias_type = CUDA_R_32F;
      time_candidates(s, dgelu, label("dx dgelu_bgrad f32 bias").c_str(), flops);
    }
    // Row-major dW (out, in) += dy^T x: column-major dW^T (in, out) = x^T (in, N) dy (N, out): A = x (op N, ld in),
    // B = dy (op T, ld out); f32 C accumulated with beta 1.
    Problem wgrad{l.in, l.out, N, CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, l.in, CUDA_R_32F, 1.0f};
    wgrad.a = x;
    wgrad.b = dy;
    wgrad.c = dw;
    time_candidates(s, wgrad, label("dw f32").c_str(), flops);
    Problem wgrad_bias = wgrad;
    wgrad_bias.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    wgrad_bias.bias = bias_grad;
    time_candidates(s, wgrad_bias, label("dw f32 bgradb").c_str(), flops);
    for (void* p : {x, w, dy, y, dx, dw, bias, bias_grad}) cudaFree(p);
  }
  if (fc_preact) cudaFree(fc_preact);
  cudaFree(fc_bias_grad);
}

int run(int argc, char** argv) {
  std::vector<int64_t> dims{1600, 2048, 4096}, tokens{8192, 8192, 4096};
  Sweep s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--dims") {
      dims = parse_list(argv[i + 1]);
    } else if (flag == "--tokens") {
      tokens = parse_list(argv[i + 1]);
    } else if (flag == "--candidates") {
      s.candidates = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "gemm_sweep: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (tokens.size() != dims.size()) {
    std::fprintf(stderr, "gemm_sweep: --tokens needs one count per width in --dims\n");
    return 2;
  }
  TANDEM_CUBLAS_CHECK(cublasLtCreate(&s.handle));
  TANDEM_CUDA_CHECK(cudaStreamCreate(&s.stream));
  TANDEM_CUDA_CHECK(cudaMalloc(&s.workspace, kWorkspaceBytes));
  std::printf("cuBLASLt %zu, candidates up to %d, workspace %zu MiB\n", cublasLtGetVersion(), s.candidates,
              kWorkspaceBytes >> 20);
  std::mt19937 rng(1);
  for (size_t i = 0; i < dims.size(); ++i) sweep_width(s, dims[i], tokens[i], rng);
  cublasLtDestroy(s.handle);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_sweep: %s\n", e.what());
    return 1;
  }
}
