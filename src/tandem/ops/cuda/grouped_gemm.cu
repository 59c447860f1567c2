// The experts' grouped products in one cublasGemmGroupedBatchedEx call (grouped_gemm.h). cuBLAS reads its matrix
// pointers from arrays in device memory and everything else (shapes, leading dims, operations, scales, group sizes)
// from host arrays; the pointer arrays are written here by a kernel from the three bases and each group's expert
// index and first row, passed by value in chunks of kChunk groups, so nothing waits for the GPU and the arrays live in
// op scratch from the device arena, freed when the call is queued (the arena is stream-ordered: the next user of the
// bytes runs after the call on the same stream).
#include <cublasLt.h>  // TANDEM_CUBLAS_CHECK names the status with cublasLtGetStatusString
#include <cublas_v2.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/gemm_plan.h"
#include "tandem/ops/cuda/grouped_gemm.h"
#include "tandem/ops/cuda/workspace.h"

namespace tandem::ops::cuda {
namespace {

// Groups per launch of the pointer kernel: its by-value argument, 12 bytes a group, stays within 4 KB.
constexpr int kChunk = 256;

// The three pointer arrays' steps (grouped_path.h's PointerStep), cuBLAS's A, B, C in that order.
struct Steps {
  const char* base[3];
  int64_t group_bytes[3];
  int64_t row_bytes[3];
};

// Up to kChunk problems: each one's expert index and first routed row.
struct Chunk {
  int32_t count;
  int32_t group[kChunk];
  int64_t first_row[kChunk];
};

// ptrs (3, problems): ptrs[j * problems + begin + i] = base[j] + group[i] * group_bytes[j] + first_row[i] *
// row_bytes[j], for the chunk's problems i, one thread each.
__global__ void pointers_kernel(Steps s, Chunk c, int64_t begin, int64_t problems, void** ptrs) {
  const int i = static_cast<int>(threadIdx.x);
  if (i >= c.count) return;
  for (int j = 0; j < 3; ++j)
    ptrs[j * problems + begin + i] =
        const_cast<char*>(s.base[j]) + c.group[i] * s.group_bytes[j] + c.first_row[i] * s.row_bytes[j];
}

struct GroupedContext {
  explicit GroupedContext(device::CudaDevice& dev) {
    TANDEM_CUBLAS_CHECK(cublasCreate(&handle));
    TANDEM_CUBLAS_CHECK(cublasSetStream(handle, dev.compute_stream()));
    // After the stream (setting one puts the default workspace back): the cuBLASLt products' workspace, on the same
    // stream, so never in use by both at once, and already counted by the planner, in place of a pool of cuBLAS's own.
    TANDEM_CUBLAS_CHECK(cublasSetWorkspace(handle, gemm_workspace(dev), static_cast<size_t>(kGemmWorkspaceBytes)));
    TANDEM_CUBLAS_CHECK(cublasSetMathMode(
        handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    TANDEM_CUBLAS_CHECK(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED));
    TANDEM_CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));  // the scales are host arrays
  }
  ~GroupedContext() {
    if (handle) cublasDestroy(handle);
  }
  GroupedContext(const GroupedContext&) = delete;
  GroupedContext& operator=(const GroupedContext&) = delete;

  cublasHandle_t handle = nullptr;
  std::mutex mu;
};

}  // namespace

void queue_grouped_call(device::CudaDevice& dev, const GroupedCall& call, const std::vector<int64_t>& rows) {
  const GroupedOperands& o = call.operands;
  const int64_t problems = nonempty_groups(rows);
  if (problems == 0) return;
  // The pointer arrays, (3, problems) pointers: grouped_pointer_bytes, which the planner counts.
  Tensor ptrs = Tensor::empty({grouped_pointer_bytes(rows) / 4}, DType::I32, dev, "grouped products' pointers");
  void** p = static_cast<void**>(ptrs.raw());
  const Steps steps{
      {static_cast<const char*>(o.a.base), static_cast<const char*>(o.b.base), static_cast<const char*>(o.c.base)},
      {o.a.group_bytes, o.b.group_bytes, o.c.group_bytes},
      {o.a.row_bytes, o.b.row_bytes, o.c.row_bytes}};
  // Per problem (one cuBLAS group of one product each): shapes, leading dims, operations and scales, on the host.
  const size_t np = static_cast<size_t>(problems);
  std::vector<int64_t> m(np, call.m), n(np, call.n), k(np, call.k), lda(np, call.lda), ldb(np, call.ldb),
      ldc(np, call.ldc), sizes(np, 1);
  std::vector<cublasOperation_t> op_a(np, call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N),
      op_b(np, call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  std::vector<float> alpha(np, 1.0f), beta(np, call.beta);
  Chunk chunk{};
  int64_t problem = 0, first = 0;
  const auto flush = [&] {
    if (chunk.count == 0) return;
    pointers_kernel<<<1, kChunk, 0, dev.compute_stream()>>>(steps, chunk, problem - chunk.count, problems, p);
    TANDEM_CUDA_CHECK(cudaGetLastError());
    chunk.count = 0;
  };
  for (size_t g = 0; g < rows.size(); ++g) {
    if (rows[g] > 0) {
      (call.rows_are_depth ? k : n)[static_cast<size_t>(problem)] = rows[g];
      chunk.group[chunk.count] = static_cast<int32_t>(g);
      chunk.first_row[chunk.count] = first;
      ++chunk.count;
      ++problem;
      if (chunk.count == kChunk) flush();
    }
    first += rows[g];
  }
  flush();
  const cudaDataType_t in = gemm_data_type(o.in), out = gemm_data_type(o.out);
  GroupedContext& ctx = dev.context<GroupedContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  const cublasStatus_t status = cublasGemmGroupedBatchedEx_64(
      ctx.handle, op_a.data(), op_b.data(), m.data(), n.data(), k.data(), alpha.data(),
      const_cast<const void* const*>(p), in, lda.data(), const_cast<const void* const*>(p + problems), in, ldb.data(),
      beta.data(), p + 2 * problems, out, ldc.data(), problems, sizes.data(), CUBLAS_COMPUTE_32F);
  if (status != CUBLAS_STATUS_SUCCESS)
    TANDEM_FAIL(call.op, ": cublasGemmGroupedBatchedEx over ", problems, " groups, ", dtype_name(o.in), " into ",
                dtype_name(o.out), ": ", cublasGetStatusString(status));
}

}  // namespace tandem::ops::cuda
