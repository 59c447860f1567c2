// The CPU backend of the op set: every op of op_list.h with the contracts of tandem/ops/ops.h, shapes and dtypes
// already checked by ops.cc. Kernels are templates over the compute dtype's storage (cpu/element.h) with fp32 math.
// Matrix products go through OpenBLAS; loops split over OpenMP threads in thread-count-independent ways, and only
// when the work pays for it (op_util.h). Ids or targets outside [0, vocab) throw.
#pragma once

#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/ops/backend.h"
#include "tandem/ops/ops.h"

namespace tandem::ops::cpu {

#define TANDEM_OP_DECLARE(R, name, params, args) R name params;
TANDEM_OPS(TANDEM_OP_DECLARE)
#undef TANDEM_OP_DECLARE

// The scratch the kernels allocate (backend.h's Scratch), each defined beside its kernel.
int64_t matmul_scratch(const ScratchContext& ctx, const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a,
                       bool trans_b, float beta);
int64_t linear_forward_scratch(const ScratchContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                               const Tensor& residual, const Tensor& y);
int64_t fp8_matmul_scratch(const ScratchContext& ctx, const Tensor& a, const Tensor& a_inv_scale, const Tensor& b,
                           const Tensor& b_inv_scale, const Tensor& bias, const Tensor& c, const Tensor& d,
                           bool fast_accum, Fp8Blocks a_blocks, Fp8Blocks b_blocks);
int64_t linear_weight_grad_scratch(const ScratchContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& dweight,
                                   const Tensor& dbias);
// The grouped products' (moe.cc): the largest of their groups' matmul scratch, each freed before the next group's.
int64_t grouped_matmul_scratch(const ScratchContext& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
                               const std::vector<int64_t>& rows, bool trans_b, float beta);
int64_t grouped_weight_grad_scratch(const ScratchContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& dw,
                                    const std::vector<int64_t>& rows);
int64_t attention_gqa_forward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads,
                                      const Tensor& y, const Tensor& lse, int64_t block_bytes);
int64_t attention_gqa_backward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads,
                                       const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dqkv,
                                       int64_t block_bytes);
int64_t attention_gqa_documents_forward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads,
                                                const Tensor& documents, const Tensor& y, const Tensor& lse);
int64_t attention_gqa_documents_backward_scratch(const ScratchContext& ctx, const Tensor& qkv, int heads, int kv_heads,
                                                 const Tensor& documents, const Tensor& y, const Tensor& lse,
                                                 const Tensor& dy, const Tensor& dqkv);

}  // namespace tandem::ops::cpu
