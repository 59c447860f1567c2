// cuBLASLt products for the GEMM ops (gemm_plan.h): fp32 accumulation (CUBLAS_COMPUTE_32F, which for f32 inputs is
// true fp32, not TF32), descriptors and the chosen algorithm cached per shape, dtypes, alignments, epilogue and FP8
// settings in a per-device context, with one 32 MiB workspace from the device arena.
//
// Algorithm choice: the heuristic's first choice is often not its fastest candidate at the model's shapes (by 5-15%
// at the gpt's, bench/gpu/gemm_sweep). So the first call of each plan times the heuristic's candidates without
// split-K on that call's operands and keeps the fastest, if its output bits equal the first choice's there. Without
// split-K every output element sums its K products in the same order whichever tile the algorithm uses (gemm_sweep
// found all such candidates bit-equal at the gpt's shapes), and the comparison keeps any exception out, so the choice
// changes the time and never the bits; when the first choice itself splits K it is kept, untimed.
//
// Row-major to column-major: cuBLASLt is column-major, and a row-major (r, c) matrix is the column-major (c, r)
// matrix with the same bytes. So the row-major C = op(a) op(b) is computed as the column-major
// C^T = op(b)^T op(a)^T: cuBLASLt's A is our b, its B is our a, and its (m, n) is our (N, M). For FP8 the scales
// follow the operands: cuBLASLt's A scale is our b's, its B scale our a's; our TN form (a (M, K), b (N, K), K
// contiguous in both) is cuBLASLt's A transposed and B not, the only form its FP8 kernels take. Scales of several
// blocks (ScaleMode) set CUBLASLT_MATMUL_DESC_A_SCALE_MODE / B_SCALE_MODE likewise swapped; the kernels for them
// may have no fast accumulation, and then the plan is made without it (below).
#include "tandem/ops/cuda/gemm_plan.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <compare>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/gemm_stats.h"
#include "tandem/ops/cuda/workspace.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr size_t kWorkspaceBytes = static_cast<size_t>(kGemmWorkspaceBytes);
constexpr int kCandidates = 8;  // heuristic results asked for and timed at a plan's first call

cublasLtMatmulMatrixScale_t cublas_mode(ScaleMode m) {
  switch (m) {
    case ScaleMode::Scalar:
      break;
    case ScaleMode::OuterVec:
      return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case ScaleMode::Vec128:
      return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case ScaleMode::Blk128x128:
      return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

const char* mode_name(ScaleMode m) {
  switch (m) {
    case ScaleMode::Scalar:
      break;
    case ScaleMode::OuterVec:
      return "one per row (OUTER_VEC_32F)";
    case ScaleMode::Vec128:
      return "1 x 128 blocks (VEC128_32F)";
    case ScaleMode::Blk128x128:
      return "128 x 128 blocks (BLK128x128_32F)";
  }
  return "one scale (SCALAR_32F)";
}

const char* type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F:
      return "f32";
    case CUDA_R_16BF:
      return "bf16";
    case CUDA_R_16F:
      return "f16";
    case CUDA_R_8F_E4M3:
      return "e4m3";
    case CUDA_R_8F_E5M2:
      return "e5m2";
    default:
      return "?";
  }
}

// The largest power of two (up to 256) dividing the address: cuBLASLt's heuristics assume 256-byte aligned operands
// unless told otherwise, and a view into a tensor may be less aligned.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// Everything the descriptors and the algorithm choice depend on.
struct PlanKey {
  int64_t m, n, k;
  bool trans_a, trans_b;
  int64_t ld_a, ld_b;
  cudaDataType_t a_type, b_type, d_type;  // C has d's type
  uint32_t align_a, align_b, align_c, align_d;
  Epilogue epilogue;
  uint32_t align_bias;  // 0 without an epilogue
  bool scaled;          // FP8: a and b scale pointers set
  bool fast_accum;
  ScaleMode a_mode, b_mode;  // FP8: how a's and b's scales are laid out (Scalar otherwise)
  auto operator<=>(const PlanKey&) const = default;
};

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

template <class V>
void set_attribute(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const V& value) {
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof(value)));
}

// The per-call pointers of a plan's descriptor: the epilogue's vector and the FP8 scales (their values are not part
// of the key; the heuristic reads the bias pointer's alignment, which is).
void set_pointers(const Plan& plan, const PlanKey& key, const Product& p) {
  if (key.epilogue != Epilogue::None) set_attribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  if (key.scaled) {
    set_attribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(p.b_scale));
    set_attribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(p.a_scale));
  }
}

// Builds the descriptors for one plan and asks the heuristic for its best algorithms within the workspace. Without
// an epilogue a missing algorithm throws; with one, the plan comes back unsupported.
Plan make_plan(cublasLtHandle_t handle, const PlanKey& key, const Product& product) {
  Plan p;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t op_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our a
  set_attribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_attribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  if (key.epilogue != Epilogue::None) {
    const cublasLtEpilogue_t e = key.epilogue == Epilogue::Bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
    set_attribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, e);
    // FP8 products default the bias type by their output in their own way (bf16 for an f32 D): name it, d's.
    if (key.scaled) set_attribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(key.d_type));
  }
  if (key.scaled) set_attribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(key.fast_accum ? 1 : 0));
  const bool blocked = key.a_mode != ScaleMode::Scalar || key.b_mode != ScaleMode::Scalar;
  if (blocked) {  // swapped as the operands are: cuBLASLt's A is our b
    set_attribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<int32_t>(cublas_mode(key.b_mode)));
    set_attribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<int32_t>(cublas_mode(key.a_mode)));
  }
  set_pointers(p, key, product);
  // Column-major shapes of the stored bytes: our b is (K, N) row-major = (N, K) column-major, or (K, N) when
  // transposed; our a is (K, M) column-major, or (M, K) when transposed; C is (N, M). Leading dims are the
  // row-major row lengths.
  const int64_t m = key.m, n = key.n, k = key.k;
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, key.b_type, key.trans_b ? k : n, key.trans_b ? n : k, key.ld_b));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, key.a_type, key.trans_a ? m : k, key.trans_a ? k : m, key.ld_a));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, key.d_type, n, m, n));

  cublasLtMatmulPreference_t pref = nullptr;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kWorkspaceBytes;
  const uint32_t aligns[4] = {key.align_b, key.align_a, key.align_c, key.align_d};
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
  if ((status != CUBLAS_STATUS_SUCCESS || found == 0) && blocked && key.fast_accum) {
    // cuBLASLt's kernels for scales of several blocks may have no fast accumulation (Hopper's 1 x 128 and 128 x 128
    // ones scale their partial sums into fp32 at every 128 of K): the plan is then made without it, summing in fp32
    // as the products without fast_accum do (the key keeps fast_accum as asked).
    set_attribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(0));
    found = 0;
    status =
        cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.c, p.c, pref, kCandidates, results.data(), &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if ((status != CUBLAS_STATUS_SUCCESS || found == 0) && key.epilogue != Epilogue::None) {
    destroy(p);
    p.supported = false;
    return p;
  }
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    destroy(p);
    TANDEM_FAIL(product.op, ": cuBLASLt has no algorithm for (", m, " x ", k, ") @ (", k, " x ", n, ")",
                key.trans_a ? " with a transposed" : "", key.trans_b ? " with b transposed" : "", ", inputs ",
                type_name(key.a_type), " and ", type_name(key.b_type), ", output ", type_name(key.d_type),
                ", operand alignments ", key.align_a, "/", key.align_b, "/", key.align_d, " bytes",
                blocked ? std::string(", scales of a ") + mode_name(key.a_mode) + " and of b " + mode_name(key.b_mode)
                        : std::string(),
                ": ", status == CUBLAS_STATUS_SUCCESS ? "no heuristic result" : cublasLtGetStatusString(status));
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

// Launches the plan's product with `algo` into `d`: D = op(a) op(b) + beta C, C and D sharing the plan's layout.
cublasStatus_t launch(GemmContext& ctx, const Plan& plan, const cublasLtMatmulAlgo_t& algo, const Product& p, void* d,
                      cudaStream_t stream) {
  const float alpha = 1.0f;
  return cublasLtMatmul(ctx.handle, plan.op, &alpha, p.b.raw(), plan.a, p.a.raw(), plan.b, &p.beta, p.c_in.raw(),
                        plan.c, d, plan.c, &algo, ctx.workspace.raw(), kWorkspaceBytes, stream);
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
// fastest as plan.algo, if it gives the same bits as the heuristic's first choice here (its output and the epilogue's
// bias gradient, `bias_grad` of `bias_bytes`, are compared); else the first choice stays. The runs write into d
// itself when the product does not read it (beta 0), else into a buffer of d's size outside the arena, so the call's
// data are never changed; when that buffer cannot be had, the first choice stays. Waits for the stream: it runs once
// per plan.
void choose_fastest(GemmContext& ctx, device::CudaDevice& dev, Plan& plan, const Product& p, const void* bias_grad,
                    size_t bias_bytes) {
  std::vector<cublasLtMatmulAlgo_t> candidates;
  candidates.swap(plan.untimed);
  const cudaStream_t stream = dev.compute_stream();
  void* out = p.d.raw();
  void* scratch = nullptr;
  if (p.beta != 0.0f) {
    dev.make_current();
    if (cudaMalloc(&scratch, p.d.nbytes()) != cudaSuccess) {
      cudaGetLastError();  // not enough room beside the arena: keep the first choice
      return;
    }
    out = scratch;
  }
  float best_ms = 0.0f;
  size_t best = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const cublasLtMatmulAlgo_t& algo = candidates[i];
    if (launch(ctx, plan, algo, p, out, stream) != CUBLAS_STATUS_SUCCESS) continue;
    float ms = 0.0f;
    bool ok = true;
    for (int run = 0; run < 3 && ok; ++run) {
      device::CudaEvent start(true), stop(true);
      start.record(stream);
      ok = launch(ctx, plan, algo, p, out, stream) == CUBLAS_STATUS_SUCCESS;
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
    const bool first_ran = launch(ctx, plan, candidates[0], p, out, stream) == CUBLAS_STATUS_SUCCESS;
    const std::vector<unsigned char> want = result_bytes(out, p.d.nbytes(), bias_grad, bias_bytes, stream);
    const bool best_ran = launch(ctx, plan, candidates[best], p, out, stream) == CUBLAS_STATUS_SUCCESS;
    const std::vector<unsigned char> got = result_bytes(out, p.d.nbytes(), bias_grad, bias_bytes, stream);
    if (first_ran && best_ran && want == got) plan.algo = candidates[best];
  }
  if (scratch) {
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
    TANDEM_CUDA_CHECK(cudaFree(scratch));
  }
}

}  // namespace

bool queue_product(device::CudaDevice& dev, const Product& p) {
  const bool scaled = p.a_scale != nullptr;
  TANDEM_CHECK(scaled == (p.b_scale != nullptr), p.op, ": one FP8 scale without the other");
  GemmContext& ctx = dev.context<GemmContext>();
  const PlanKey key{.m = rows_of(p.d),
                    .n = cols_of(p.d),
                    .k = p.trans_a ? rows_of(p.a) : cols_of(p.a),
                    .trans_a = p.trans_a,
                    .trans_b = p.trans_b,
                    .ld_a = cols_of(p.a),
                    .ld_b = cols_of(p.b),
                    .a_type = gemm_data_type(p.a.dtype()),
                    .b_type = gemm_data_type(p.b.dtype()),
                    .d_type = gemm_data_type(p.d.dtype()),
                    .align_a = alignment_of(p.a.raw()),
                    .align_b = alignment_of(p.b.raw()),
                    .align_c = alignment_of(p.c_in.raw()),
                    .align_d = alignment_of(p.d.raw()),
                    .epilogue = p.epilogue,
                    .align_bias = p.epilogue == Epilogue::None ? 0 : alignment_of(p.bias),
                    .scaled = scaled,
                    .fast_accum = scaled && p.fast_accum,
                    .a_mode = scaled ? p.a_mode : ScaleMode::Scalar,
                    .b_mode = scaled ? p.b_mode : ScaleMode::Scalar};
  std::lock_guard<std::mutex> lock(ctx.mu);
  auto it = ctx.plans.find(key);
  if (it == ctx.plans.end()) it = ctx.plans.emplace(key, make_plan(ctx.handle, key, p)).first;
  Plan& plan = it->second;
  if (!plan.supported) return false;
  set_pointers(plan, key, p);
  if (!p.time_candidates) plan.untimed.clear();
  if (!plan.untimed.empty()) {
    const bool writes_bias = p.epilogue == Epilogue::BiasGradB;  // then `bias` is the (m) f32 gradient it writes
    choose_fastest(ctx, dev, plan, p, writes_bias ? p.bias : nullptr,
                   writes_bias ? static_cast<size_t>(key.m) * sizeof(float) : 0);
  }
  // C and D share one descriptor: the same type and shape (in place when c_in is d, as cuBLASLt requires for that).
  const cublasStatus_t status = launch(ctx, plan, plan.algo, p, p.d.raw(), dev.compute_stream());
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && p.epilogue != Epilogue::None) {
    destroy(plan);
    plan.supported = false;  // refused at the call: do without the epilogue from now on
    return false;
  }
  TANDEM_CUBLAS_CHECK(status);
  return true;
}

cudaDataType_t gemm_data_type(DType t) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    case DType::E4M3:
      return CUDA_R_8F_E4M3;
    case DType::E5M2:
      return CUDA_R_8F_E5M2;
    case DType::I32:
      break;
  }
  TANDEM_FAIL("matmul: dtype ", dtype_name(t), " is not a float dtype");
}

void* gemm_workspace(device::CudaDevice& dev) { return dev.context<GemmContext>().workspace.raw(); }

EpilogueCounts epilogue_counts(device::CudaDevice& dev) {
  GemmContext& ctx = dev.context<GemmContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  EpilogueCounts counts;
  for (const auto& [key, plan] : ctx.plans) {
    if (key.epilogue == Epilogue::None) continue;
    (key.epilogue == Epilogue::Bias ? counts.bias : counts.bias_grad) += 1;
    if (!plan.supported) counts.unsupported += 1;
  }
  return counts;
}

}  // namespace tandem::ops::cuda
