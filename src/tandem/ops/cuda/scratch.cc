// The scratch the CUDA kernels allocate (backend.h's Scratch), for the planner; the kernels are in the .cu files
// beside this one. cuDNN's attention workspace (2 B H T^2 bytes and more for the deterministic backward) is asked of
// cuDNN on the run's device when the planning process has it (ScratchContext::planned_device: the run's own
// preflight), and estimated from the sizes cuDNN gave on an H200 otherwise (`tandem plan` away from the GPU). Not
// counted: CUB's radix-sort temporary in embedding_backward (a few KiB at model shapes).
#include <algorithm>

#include "tandem/ops/backend.h"
#include "tandem/ops/cuda/grouped_path.h"
#include "tandem/ops/cuda/scratch_sizes.h"
#include "tandem/ops/cuda/workspace.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

// cuDNN's workspace for the attention graph of this shape: asked of cuDNN on the run's device, else estimated (a
// build without CUDA has no cuDNN to ask).
int64_t cudnn_workspace(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads, bool backward,
                        int64_t block_bytes) {
#ifdef TANDEM_WITH_CUDA
  if (ctx.planned_device)
    return attention_gqa_cudnn_workspace_bytes(ctx.planned_device, qkv, heads, kv_heads, backward, block_bytes);
#endif
  const int64_t d = qkv.dim(2) / (heads + 2 * static_cast<int64_t>(kv_heads));
  return attention_cudnn_workspace_estimate(qkv.dtype(), qkv.dim(0), heads, kv_heads, qkv.dim(1), d, backward,
                                            block_bytes);
}

// attention_gqa.cc, .cu: cuDNN's workspace where cuDNN runs, else the plain backward's rowsum(dO * O) (B, H, T) f32.
int64_t attention_gqa_forward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads,
                                      const Tensor&, const Tensor&, int64_t block_bytes) {
  return cudnn_workspace(ctx, qkv, heads, kv_heads, false, block_bytes);
}
int64_t attention_gqa_backward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads,
                                       const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       int64_t block_bytes) {
  const int64_t cudnn = cudnn_workspace(ctx, qkv, heads, kv_heads, true, block_bytes);
  return cudnn > 0 ? cudnn : attention_gqa_backward_scratch_bytes(qkv.dim(0), heads, qkv.dim(1));
}
// Attention kept inside documents runs the flash kernels alone (attention_gqa.cc): no workspace forward, their
// rowsum(dO * O) (B, H, T) f32 backward.
int64_t attention_gqa_documents_forward_scratch(const ScratchContext&, const Tensor&, int, int, const Tensor&,
                                                const Tensor&, const Tensor&) {
  return 0;
}
int64_t attention_gqa_documents_backward_scratch(const ScratchContext&, const Tensor& qkv, int heads, int,
                                                 const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                 const Tensor&) {
  return attention_gqa_backward_scratch_bytes(qkv.dim(0), heads, qkv.dim(1));
}
// embedding.cu: the sort's keys and positions in and out, (3, N) i32.
int64_t embedding_backward_scratch(const ScratchContext&, const Tensor& ids, const Tensor&, const Tensor&, int64_t,
                                   int64_t) {
  return 3 * ids.numel() * 4;
}

// column_sum.cuh: the partial sums of the bias gradient, (slices, C) f32.
int64_t bias_backward_scratch(const ScratchContext&, const Tensor& dy, const Tensor&) {
  return column_sum_scratch_bytes(1, rows_of(dy), cols_of(dy), static_cast<int64_t>(dtype_size(dy.dtype())));
}

// layernorm.cu: the partial sums of dgamma and dbeta.
int64_t layernorm_backward_scratch(const ScratchContext&, const Tensor&, const Tensor& x, const Tensor&, const Tensor&,
                                   const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return layernorm_backward_scratch_bytes(rows_of(x), cols_of(x), static_cast<int64_t>(dtype_size(x.dtype())));
}
int64_t layernorm_backward_add_scratch(const ScratchContext&, const Tensor&, const Tensor& x, const Tensor&,
                                       const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&) {
  return layernorm_backward_scratch_bytes(rows_of(x), cols_of(x), static_cast<int64_t>(dtype_size(x.dtype())));
}

// gemm.cc: the bias gradient the BGRADB epilogue writes, (out) f32, or where cuBLASLt has no such algorithm the
// column sums' partial sums: the larger of the two.
int64_t linear_weight_grad_scratch(const ScratchContext&, const Tensor& dy, const Tensor&, const Tensor& dweight,
                                   const Tensor& dbias) {
  if (!dbias.defined()) return 0;
  const int64_t sums =
      column_sum_scratch_bytes(1, rows_of(dy), cols_of(dy), static_cast<int64_t>(dtype_size(dy.dtype())));
  return dweight.dtype() == DType::F32 ? std::max(sums, dbias.numel() * 4) : sums;
}

// gemm.cc, grouped_gemm.cu: the grouped call's pointer arrays where the rule (grouped_path.h) takes it; none on the
// per-expert loop.
int64_t grouped_matmul_scratch(const ScratchContext&, const Tensor& a, const Tensor& b, const Tensor& c,
                               const std::vector<int64_t>& rows, bool, float) {
  return grouped_scratch_bytes(grouped_path(grouped_matmul_operands(a, b, c), b.dim(1), b.dim(2), rows), rows);
}
int64_t grouped_weight_grad_scratch(const ScratchContext&, const Tensor& dy, const Tensor& x, const Tensor& dw,
                                    const std::vector<int64_t>& rows) {
  return grouped_scratch_bytes(grouped_path(grouped_weight_grad_operands(dy, x, dw), dw.dim(1), dw.dim(2), rows), rows);
}

// rmsnorm.cu: dgamma's f32 partials, (blocks, C) in the packed pass, (slices, C) in the general one.
int64_t rmsnorm_backward_scratch(const ScratchContext&, const Tensor&, const Tensor& x, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&) {
  return rmsnorm_backward_scratch_bytes(rows_of(x), cols_of(x), static_cast<int64_t>(dtype_size(x.dtype())));
}
int64_t rmsnorm_backward_add_scratch(const ScratchContext&, const Tensor&, const Tensor& x, const Tensor&,
                                     const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return rmsnorm_backward_scratch_bytes(rows_of(x), cols_of(x), static_cast<int64_t>(dtype_size(x.dtype())));
}

// head_norm.cu: the gains' f32 partials, (slices, 2, D), when any head is normalised.
int64_t head_norm_backward_scratch(const ScratchContext&, const Tensor&, const Tensor& x, const Tensor& q_gain,
                                   const Tensor&, int heads, int kv_heads, const Tensor&, const Tensor&, const Tensor&,
                                   const Tensor&, const Tensor&, int64_t) {
  if (heads + kv_heads == 0 || cols_of(x) == 0) return 0;
  return head_norm_backward_scratch_bytes(rows_of(x), q_gain.dim(0));
}

}  // namespace

const Scratch& scratch() {
  static const Scratch table = [] {
    Scratch s;
    s.embedding_backward = &embedding_backward_scratch;
    s.bias_backward = &bias_backward_scratch;
    s.layernorm_backward = &layernorm_backward_scratch;
    s.layernorm_backward_add = &layernorm_backward_add_scratch;
    s.linear_weight_grad = &linear_weight_grad_scratch;
    s.grouped_matmul = &grouped_matmul_scratch;
    s.grouped_weight_grad = &grouped_weight_grad_scratch;
    s.rmsnorm_backward = &rmsnorm_backward_scratch;
    s.rmsnorm_backward_add = &rmsnorm_backward_add_scratch;
    s.head_norm_backward = &head_norm_backward_scratch;
    s.attention_gqa_forward = &attention_gqa_forward_scratch;
    s.attention_gqa_backward = &attention_gqa_backward_scratch;
    s.attention_gqa_documents_forward = &attention_gqa_documents_forward_scratch;
    s.attention_gqa_documents_backward = &attention_gqa_documents_backward_scratch;
    s.fixed = kGemmWorkspaceBytes + kSumSquaresScratchBytes;
    return s;
  }();
  return table;
}

}  // namespace tandem::ops::cuda
