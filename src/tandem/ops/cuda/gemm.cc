// CUDA matrix product through cuBLASLt: a and b in X (f32, bf16, f16), c in X or f32, fp32 accumulation
// (CUBLAS_COMPUTE_32F, which for f32 inputs is true fp32, not TF32). Descriptors and the chosen algorithm are cached
// per shape in a per-device context, with one 32 MiB workspace from the device arena.
// The linear layer's ops use cuBLASLt's epilogues: linear_forward adds the bias (CUBLASLT_EPILOGUE_BIAS) and the
// residual (as the C operand with beta 1, D being y) before the one rounding; linear_weight_grad takes the bias
// gradient from the weight gradient's product (CUBLASLT_EPILOGUE_BGRADB: the column sums of dy, which is cuBLASLt's
// B there, over the product's K = N rows), which cuBLASLt writes rather than adds: into f32 scratch, then added to
// dbias. Where cuBLASLt has no algorithm with the epilogue, the ops fall back to matmul and the separate passes.
//
// Algorithm choice: the heuristic's first choice is often not its fastest candidate at the model's shapes (by 5-15%
// at the gpt's, bench/gpu/gemm_sweep). So the first call of each shape times the heuristic's candidates without
// split-K on that call's operands and keeps the fastest, if its output bits equal the first choice's there. Without
// split-K every output element sums its K products in the same order whichever tile the algorithm uses (gemm_sweep
// found all such candidates bit-equal at the gpt's shapes), and the comparison keeps any exception out, so the choice
// changes the time and never the bits; when the first choice itself splits K it is kept, untimed.
//
// Row-major to column-major: cuBLASLt is column-major, and a row-major (r, c) matrix is the column-major (c, r)
// matrix with the same bytes. So the row-major C = op(a) op(b) is computed as the column-major
// C^T = op(b)^T op(a)^T: cuBLASLt's A is our b, its B is our a, and its (m, n) is our (N, M).
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/gemm_stats.h"
#include "tandem/ops/cuda/workspace.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr size_t kWorkspaceBytes = static_cast<size_t>(kGemmWorkspaceBytes);
constexpr int kCandidates = 8;  // heuristic results asked for and timed at a shape's first call

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    case DType::I32:
      break;
  }
  TANDEM_FAIL("matmul: dtype ", dtype_name(t), " is not a float dtype");
}

// The largest power of two (up to 256) dividing the address: cuBLASLt's heuristics assume 256-byte aligned operands
// unless told otherwise, and a view into a tensor may be less aligned.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// What the product adds in its epilogue.
enum class Epilogue : int64_t {
  None = 0,
  Bias = 1,       // D += bias broadcast over D's columns (our rows): a bias per output feature
  BiasGradB = 2,  // bias gradient = the sums of cuBLASLt's op(B) over K, one per column of D
};

// Everything the descriptors and the algorithm choice depend on.
using PlanKey = std::array<int64_t, 15>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our b), B (our a), C and D
  cublasLtMatmulAlgo_t algo{};
  bool supported = true;  // false: cuBLASLt has no algorithm for this epilogue (the caller does without it)
  std::vector<cublasLtMatmulAlgo_t> untimed;  // candidates to time at the first call (algo among them); then empty
};

int split_k_of(const cublasLtMatmulAlgo_t& algo) {
  int split = 1;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof split, &written) !=
      CUBLAS_STATUS_SUCCESS)
    return 0;  // unknown: treated as splitting K (never timed against the others)
  return split;
}

void destroy(Plan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  p = Plan{};
}

struct GemmContext {
  explicit GemmContext(device::CudaDevice& dev)
      : workspace(Tensor::empty({static_cast<int64_t>(kWorkspaceBytes / 4)}, DType::F32, dev, "cuBLASLt workspace")) {
    TANDEM_CUBLAS_CHECK(cublasLtCreate(&handle));
  }
  ~GemmContext() {
    for (auto& [key, p] : plans) destroy(p);
    if (handle) cublasLtDestroy(handle);
  }
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  cublasLtHandle_t handle = nullptr;
  Tensor workspace;
  std::map<PlanKey, Plan> plans;
  std::mutex mu;
};

// Builds the descriptors for one shape and asks the heuristic for its best algorithm within the workspace. `bias`:
// the epilogue's vector (its alignment is part of the key; the call sets the pointer each time). Without an
// epilogue a missing algorithm throws; with one, the plan comes back unsupported.
Plan make_plan(cublasLtHandle_t handle, const PlanKey& key, const void* bias) {
  const auto [m, n, k, trans_a, trans_b, ld_a, ld_b, ab_type, c_type, align_a, align_b, align_c, align_d, epilogue,
              align_bias] = key;
  Plan p;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our a
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const auto ep = static_cast<Epilogue>(epilogue);
  if (ep != Epilogue::None) {
    const cublasLtEpilogue_t e = ep == Epilogue::Bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
    TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
    TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  // Column-major shapes of the stored bytes: our b is (K, N) row-major = (N, K) column-major, or (K, N) when
  // transposed; our a is (K, M) column-major, or (M, K) when transposed; C is (N, M). Leading dims are the
  // row-major row lengths.
  const auto ab = static_cast<cudaDataType_t>(ab_type);
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, trans_b ? k : n, trans_b ? n : k, ld_b));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, trans_a ? m : k, trans_a ? k : m, ld_a));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, static_cast<cudaDataType_t>(c_type), n, m, n));

  cublasLtMatmulPreference_t pref = nullptr;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kWorkspaceBytes;
  const uint32_t aligns[4] = {static_cast<uint32_t>(align_b), static_cast<uint32_t>(align_a),
                              static_cast<uint32_t>(align_c), static_cast<uint32_t>(align_d)};
  std::array<cublasLtMatmulHeuristicResult_t, kCandidates> results{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &workspace, sizeof(workspace));
  const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && status == CUBLAS_STATUS_SUCCESS; ++i)
    status = cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof(aligns[i]));
  if (status == CUBLAS_STATUS_SUCCESS)
    status =
        cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.c, p.c, pref, kCandidates, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if ((status != CUBLAS_STATUS_SUCCESS || found == 0) && ep != Epilogue::None) {
    destroy(p);
    p.supported = false;
    return p;
  }
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    destroy(p);
    TANDEM_FAIL("matmul: cuBLASLt has no algorithm for (", m, " x ", k, ") @ (", k, " x ", n, ")",
                trans_a ? " with a transposed" : "", trans_b ? " with b transposed" : "", ", inputs ",
                ab_type == CUDA_R_32F    ? "f32"
                : ab_type == CUDA_R_16BF ? "bf16"
                                         : "f16",
                ", output ",
                c_type == CUDA_R_32F    ? "f32"
                : c_type == CUDA_R_16BF ? "bf16"
                                        : "f16",
                ", operand alignments ", align_a, "/", align_b, "/", align_d,
                " bytes: ", status == CUBLAS_STATUS_SUCCESS ? "no heuristic result" : cublasLtGetStatusString(status));
  }
  p.algo = results[0].algo;
  if (split_k_of(p.algo) == 1) {
    for (int i = 0; i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && split_k_of(results[i].algo) == 1)
        p.untimed.push_back(results[i].algo);
    if (p.untimed.size() < 2) p.untimed.clear();  // nothing to choose between
  }
  return p;
}

// Launches the plan's product with `algo`: D = op(a) op(b) + beta C, C and D sharing the plan's layout.
cublasStatus_t launch(GemmContext& ctx, const Plan& p, const cublasLtMatmulAlgo_t& algo, const Tensor& a,
                      const Tensor& b, const void* c, void* d, float beta, cudaStream_t stream) {
  const float alpha = 1.0f;
  return cublasLtMatmul(ctx.handle, p.op, &alpha, b.raw(), p.a, a.raw(), p.b, &beta, c, p.c, d, p.c, &algo,
                        ctx.workspace.raw(), kWorkspaceBytes, stream);
}

// The bytes a product left in `out` and, when its epilogue writes one, in the bias gradient `bias_grad`, once the
// stream's work is done.
std::vector<unsigned char> result_bytes(const void* out, size_t out_bytes, const void* bias_grad, size_t bias_bytes,
                                        cudaStream_t stream) {
  std::vector<unsigned char> host(out_bytes + bias_bytes);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(host.data(), out, out_bytes, cudaMemcpyDeviceToHost, stream));
  if (bias_bytes > 0)
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(host.data() + out_bytes, bias_grad, bias_bytes, cudaMemcpyDeviceToHost, stream));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

// Times the plan's candidates on this call's operands (one warm-up, then the best of three runs each) and keeps the
// fastest as p.algo, if it gives the same bits as the heuristic's first choice here (its output and the epilogue's
// bias gradient, `bias_grad` of `bias_bytes`, are compared); else the first choice stays. The runs write into d
// itself when the product does not read it (beta 0), else into a buffer of d's size outside the arena, so the call's
// data are never changed; when that buffer cannot be had, the first choice stays. Waits for the stream: it runs once
// per shape.
void choose_fastest(GemmContext& ctx, device::CudaDevice& dev, Plan& p, const Tensor& a, const Tensor& b,
                    const Tensor& c_in, const Tensor& d, float beta, const void* bias_grad, size_t bias_bytes) {
  std::vector<cublasLtMatmulAlgo_t> candidates;
  candidates.swap(p.untimed);
  const cudaStream_t stream = dev.compute_stream();
  void* out = d.raw();
  void* scratch = nullptr;
  if (beta != 0.0f) {
    dev.make_current();
    if (cudaMalloc(&scratch, d.nbytes()) != cudaSuccess) {
      cudaGetLastError();  // not enough room beside the arena: keep the first choice
      return;
    }
    out = scratch;
  }
  float best_ms = 0.0f;
  size_t best = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const cublasLtMatmulAlgo_t& algo = candidates[i];
    if (launch(ctx, p, algo, a, b, c_in.raw(), out, beta, stream) != CUBLAS_STATUS_SUCCESS) continue;
    float ms = 0.0f;
    bool ok = true;
    for (int run = 0; run < 3 && ok; ++run) {
      device::CudaEvent start(true), stop(true);
      start.record(stream);
      ok = launch(ctx, p, algo, a, b, c_in.raw(), out, beta, stream) == CUBLAS_STATUS_SUCCESS;
      stop.record(stream);
      stop.synchronize();
      const float t = stop.ms_since(start);
      ms = run == 0 ? t : std::min(ms, t);
    }
    if (ok && (best_ms == 0.0f || ms < best_ms)) {
      best_ms = ms;
      best = i;
    }
  }
  if (best != 0) {
    // The first choice's bits, then the fastest's: taken only when they are the same.
    const bool first_ran = launch(ctx, p, candidates[0], a, b, c_in.raw(), out, beta, stream) == CUBLAS_STATUS_SUCCESS;
    const std::vector<unsigned char> want = result_bytes(out, d.nbytes(), bias_grad, bias_bytes, stream);
    const bool best_ran =
        launch(ctx, p, candidates[best], a, b, c_in.raw(), out, beta, stream) == CUBLAS_STATUS_SUCCESS;
    const std::vector<unsigned char> got = result_bytes(out, d.nbytes(), bias_grad, bias_bytes, stream);
    if (first_ran && best_ran && want == got) p.algo = candidates[best];
  }
  if (scratch) {
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
    TANDEM_CUDA_CHECK(cudaFree(scratch));
  }
}

// Queues D = op(a) op(b) + beta C through the plan of this shape and epilogue: C is `c_in` (the residual of
// linear_forward; it may be d itself, cuBLASLt's in-place form), `bias` the epilogue's vector. m, n, k > 0. Returns
// false, queuing nothing, when cuBLASLt has no algorithm for the epilogue; without one that throws.
bool queue_product(device::CudaDevice& dev, const Tensor& a, const Tensor& b, const Tensor& c_in, const Tensor& d,
                   bool trans_a, bool trans_b, float beta, Epilogue epilogue, const void* bias) {
  const int64_t m = rows_of(d), n = cols_of(d);
  const int64_t k = trans_a ? rows_of(a) : cols_of(a);
  GemmContext& ctx = dev.context<GemmContext>();
  const PlanKey key{m,
                    n,
                    k,
                    trans_a,
                    trans_b,
                    cols_of(a),
                    cols_of(b),
                    cuda_type(a.dtype()),
                    cuda_type(d.dtype()),
                    alignment_of(a.raw()),
                    alignment_of(b.raw()),
                    alignment_of(c_in.raw()),
                    alignment_of(d.raw()),
                    static_cast<int64_t>(epilogue),
                    epilogue == Epilogue::None ? 0 : alignment_of(bias)};
  std::lock_guard<std::mutex> lock(ctx.mu);
  auto it = ctx.plans.find(key);
  if (it == ctx.plans.end()) it = ctx.plans.emplace(key, make_plan(ctx.handle, key, bias)).first;
  Plan& p = it->second;
  if (!p.supported) return false;
  if (epilogue != Epilogue::None)
    TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (!p.untimed.empty()) {
    const bool writes_bias = epilogue == Epilogue::BiasGradB;  // then `bias` is the (m) f32 gradient it writes
    choose_fastest(ctx, dev, p, a, b, c_in, d, beta, writes_bias ? bias : nullptr,
                   writes_bias ? static_cast<size_t>(m) * sizeof(float) : 0);
  }
  // C and D share one descriptor: the same type and shape (in place when c_in is d, as cuBLASLt requires for that).
  const cublasStatus_t status = launch(ctx, p, p.algo, a, b, c_in.raw(), d.raw(), beta, dev.compute_stream());
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && epilogue != Epilogue::None) {
    destroy(p);
    p.supported = false;  // refused at the call: do without the epilogue from now on
    return false;
  }
  TANDEM_CUBLAS_CHECK(status);
  return true;
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float beta) {
  check_float("matmul", "a", a);
  check_dtype("matmul", "b", b, a.dtype());
  TANDEM_CHECK(c.dtype() == a.dtype() || c.dtype() == DType::F32, "matmul: c holds ", dtype_name(c.dtype()),
               ", expected ", dtype_name(a.dtype()), " or f32");
  const int64_t m = rows_of(c), n = cols_of(c);
  const int64_t k = trans_a ? rows_of(a) : cols_of(a);
  if (m == 0 || n == 0) return;
  device::CudaDevice& dev = cuda_device(c);
  if (k == 0) {
    // An empty sum: c = beta c. beta == 0 must not read c (it may hold garbage), hence the explicit zero fill.
    if (beta == 0.0f) {
      dev.fill_zero(c.raw(), c.nbytes());
    } else {
      scale(c, beta);
    }
    return;
  }
  queue_product(dev, a, b, c, c, trans_a, trans_b, beta, Epilogue::None, nullptr);
}

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                    const Tensor& y) {
  const char* op = "linear_forward";
  check_float(op, "x", x);
  check_dtype(op, "weight", weight, x.dtype());
  check_dtype(op, "y", y, x.dtype());
  if (bias.defined()) check_dtype(op, "bias", bias, x.dtype());
  if (residual.defined()) check_dtype(op, "residual", residual, x.dtype());
  const int64_t m = rows_of(y), n = cols_of(y), k = cols_of(x);
  if (m == 0 || n == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  const Tensor rows = y.view({m, n});  // (N, out)
  if (k > 0) {
    // One product: y = x W^T + residual (C, beta 1) + bias (epilogue), rounded once.
    const Tensor& c_in = residual.defined() ? residual : y;
    const float beta = residual.defined() ? 1.0f : 0.0f;
    const Epilogue e = bias.defined() ? Epilogue::Bias : Epilogue::None;
    if (queue_product(dev, x, weight, c_in, y, false, true, beta, e, bias.defined() ? bias.raw() : nullptr)) return;
    // No algorithm with the bias epilogue: the product with the residual, then the bias as its own pass.
    queue_product(dev, x, weight, c_in, y, false, true, beta, Epilogue::None, nullptr);
    add_bias(rows, bias);
    return;
  }
  matmul(x, weight, y, false, true, 0.0f);  // an empty sum: zeros
  if (bias.defined()) add_bias(rows, bias);
  if (residual.defined()) add(rows, residual.view({m, n}), rows);
}

void linear_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dweight, const Tensor& dbias) {
  const char* op = "linear_weight_grad";
  check_float(op, "dy", dy);
  check_dtype(op, "x", x, dy.dtype());
  TANDEM_CHECK(dweight.dtype() == dy.dtype() || dweight.dtype() == DType::F32, op, ": dweight holds ",
               dtype_name(dweight.dtype()), ", expected ", dtype_name(dy.dtype()), " or f32");
  if (dbias.defined()) check_dtype(op, "dbias", dbias, DType::F32);
  const int64_t rows = rows_of(dy);
  if (rows_of(dweight) == 0 || cols_of(dweight) == 0 || rows == 0) {
    matmul(dy, x, dweight, true, false, 1.0f);  // nothing to add (or an empty matrix)
    return;
  }
  device::CudaDevice& dev = cuda_device(dweight);
  // The bias gradient as an epilogue needs it in the product's output type: f32 dweight (the training case).
  if (dbias.defined() && dweight.dtype() == DType::F32) {
    Tensor part = Tensor::empty(dbias.shape(), DType::F32, dev, "linear_weight_grad bias scratch");  // (out)
    if (queue_product(dev, dy, x, dweight, dweight, true, false, 1.0f, Epilogue::BiasGradB, part.raw())) {
      axpy(1.0f, part, dbias);
      return;
    }
  }
  matmul(dy, x, dweight, true, false, 1.0f);
  if (dbias.defined()) bias_backward(dy.view({rows, cols_of(dy)}), dbias);
}

EpilogueCounts epilogue_counts(device::CudaDevice& dev) {
  GemmContext& ctx = dev.context<GemmContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  EpilogueCounts counts;
  for (const auto& [key, plan] : ctx.plans) {
    const auto e = static_cast<Epilogue>(key[13]);
    if (e == Epilogue::None) continue;
    (e == Epilogue::Bias ? counts.bias : counts.bias_grad) += 1;
    if (!plan.supported) counts.unsupported += 1;
  }
  return counts;
}

}  // namespace tandem::ops::cuda
