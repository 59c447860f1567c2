// CUDA matrix product through cuBLASLt: a and b in X (f32, bf16, f16), c in X or f32, fp32 accumulation
// (CUBLAS_COMPUTE_32F, which for f32 inputs is true fp32, not TF32). Descriptors and the chosen algorithm are cached
// per shape in a per-device context, with one 32 MiB workspace from the device arena.
//
// Row-major to column-major: cuBLASLt is column-major, and a row-major (r, c) matrix is the column-major (c, r)
// matrix with the same bytes. So the row-major C = op(a) op(b) is computed as the column-major
// C^T = op(b)^T op(a)^T: cuBLASLt's A is our b, its B is our a, and its (m, n) is our (N, M).
#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/workspace.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr size_t kWorkspaceBytes = static_cast<size_t>(kGemmWorkspaceBytes);

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

// Everything the descriptors and the algorithm choice depend on.
using PlanKey = std::array<int64_t, 12>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our b), B (our a), C = D
  cublasLtMatmulAlgo_t algo{};
};

struct GemmContext {
  explicit GemmContext(device::CudaDevice& dev)
      : workspace(Tensor::empty({static_cast<int64_t>(kWorkspaceBytes / 4)}, DType::F32, dev, "cuBLASLt workspace")) {
    TANDEM_CUBLAS_CHECK(cublasLtCreate(&handle));
  }
  ~GemmContext() {
    for (auto& [key, p] : plans) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.c);
      cublasLtMatmulDescDestroy(p.op);
    }
    if (handle) cublasLtDestroy(handle);
  }
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  cublasLtHandle_t handle = nullptr;
  Tensor workspace;
  std::map<PlanKey, Plan> plans;
  std::mutex mu;
};

// Builds the descriptors for one shape and asks the heuristic for its best algorithm within the workspace.
Plan make_plan(cublasLtHandle_t handle, const PlanKey& key) {
  const auto [m, n, k, trans_a, trans_b, ld_a, ld_b, ab_type, c_type, align_a, align_b, align_c] = key;
  Plan p;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our a
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
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
                              static_cast<uint32_t>(align_c), static_cast<uint32_t>(align_c)};
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &workspace, sizeof(workspace));
  const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && status == CUBLAS_STATUS_SUCCESS; ++i)
    status = cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof(aligns[i]));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
    TANDEM_FAIL("matmul: cuBLASLt has no algorithm for (", m, " x ", k, ") @ (", k, " x ", n, ")",
                trans_a ? " with a transposed" : "", trans_b ? " with b transposed" : "", ", inputs ",
                ab_type == CUDA_R_32F    ? "f32"
                : ab_type == CUDA_R_16BF ? "bf16"
                                         : "f16",
                ", output ",
                c_type == CUDA_R_32F    ? "f32"
                : c_type == CUDA_R_16BF ? "bf16"
                                        : "f16",
                ", operand alignments ", align_a, "/", align_b, "/", align_c,
                " bytes: ", status == CUBLAS_STATUS_SUCCESS ? "no heuristic result" : cublasLtGetStatusString(status));
  }
  p.algo = result.algo;
  return p;
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
  GemmContext& ctx = dev.context<GemmContext>();
  const PlanKey key{m,
                    n,
                    k,
                    trans_a,
                    trans_b,
                    cols_of(a),
                    cols_of(b),
                    cuda_type(a.dtype()),
                    cuda_type(c.dtype()),
                    alignment_of(a.raw()),
                    alignment_of(b.raw()),
                    alignment_of(c.raw())};
  std::lock_guard<std::mutex> lock(ctx.mu);
  auto it = ctx.plans.find(key);
  if (it == ctx.plans.end()) it = ctx.plans.emplace(key, make_plan(ctx.handle, key)).first;
  const Plan& p = it->second;
  const float alpha = 1.0f;
  // In place: C and D are the same matrix (same descriptor), as cuBLASLt requires for that.
  TANDEM_CUBLAS_CHECK(cublasLtMatmul(ctx.handle, p.op, &alpha, b.raw(), p.a, a.raw(), p.b, &beta, c.raw(), p.c, c.raw(),
                                     p.c, &p.algo, ctx.workspace.raw(), kWorkspaceBytes, dev.compute_stream()));
}

}  // namespace tandem::ops::cuda
