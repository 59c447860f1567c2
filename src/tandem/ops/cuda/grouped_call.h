// The experts' grouped products (ops.h: grouped_matmul, grouped_weight_grad) as one cublasGemmGroupedBatchedEx call
// describes them, in cuBLAS's column-major terms: where each group's matrices lie (the pointer arrays' steps), their
// shapes, leading dims and operations. gemm.cc queues the calls (grouped_gemm.h), the rule reads the operands
// (grouped_path.h), and tests/ops/test_ops_grouped_rule.cc checks that the call, read as cuBLAS documents it, is the
// op. Plain C++: no CUDA type, every build compiles it.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"

namespace tandem::ops::cuda {

// One of the grouped call's pointer arrays: group g's matrix, whose rows begin at row f of the routed rows, starts at
// base + g * group_bytes + f * row_bytes (one of the two strides is 0: a stacked expert matrix or a group's rows).
struct PointerStep {
  const void* base = nullptr;
  int64_t group_bytes = 0;
  int64_t row_bytes = 0;
};

// The grouped call's operands in cuBLAS's column-major terms (gemm_plan.cc: a row-major product is computed as its
// transpose, so cuBLAS's A is our second operand and its B our first): A and B of type `in`, C of type `out`.
struct GroupedOperands {
  PointerStep a, b, c;
  DType in, out;
};

// grouped_matmul, a (M, K) rows of group g @ op(b[g]) into c (M, N): cuBLAS's A is b[g] (G, N, K) or (G, K, N), its B
// the group's rows of a, its C those of c.
inline GroupedOperands grouped_matmul_operands(const Tensor& a, const Tensor& b, const Tensor& c) {
  const int64_t in = static_cast<int64_t>(dtype_size(a.dtype())), out = static_cast<int64_t>(dtype_size(c.dtype()));
  return {.a = {b.raw(), b.dim(1) * b.dim(2) * in, 0},
          .b = {a.raw(), 0, a.dim(1) * in},
          .c = {c.raw(), 0, c.dim(1) * out},
          .in = a.dtype(),
          .out = c.dtype()};
}

// grouped_weight_grad, dw[g] (G, N, K) += dy (M, N) rows of g ^T @ x (M, K) rows of g: cuBLAS's A is the group's rows
// of x, its B those of dy, its C dw[g].
inline GroupedOperands grouped_weight_grad_operands(const Tensor& dy, const Tensor& x, const Tensor& dw) {
  const int64_t in = static_cast<int64_t>(dtype_size(dy.dtype())), out = static_cast<int64_t>(dtype_size(dw.dtype()));
  return {.a = {x.raw(), 0, x.dim(1) * in},
          .b = {dy.raw(), 0, dy.dim(1) * in},
          .c = {dw.raw(), dw.dim(1) * dw.dim(2) * out, 0},
          .in = dy.dtype(),
          .out = dw.dtype()};
}

// One grouped product in cuBLAS's column-major terms: for each group g with rows[g] > 0, whose rows begin at row f of
// the routed rows, C_g (m, n) = op(A_g) op(B_g) + beta C_g, summed over a depth k in fp32, the matrices where
// `operands` puts them. The group's rows are n (grouped_matmul: a column of cuBLAS's C per routed row) or, with
// rows_are_depth, k (the weight gradient: the sum runs over the routed rows); that field is left 0.
struct GroupedCall {
  const char* op;  // for errors
  GroupedOperands operands;
  bool trans_a = false, trans_b = false;  // cuBLAS's op(A), op(B)
  int64_t m = 0, n = 0, k = 0;
  bool rows_are_depth = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float beta = 0.0f;
};

// The call of each op, whatever the rule says (ops_check also tries one cuBLAS does not document). grouped_matmul:
// C_g = op(A_g) op(B_g) + beta C_g with A_g = b[g] (N, K) or (K, N), B_g = the group's rows of a (K, rows), C_g those
// of c (N, rows), all column-major.
inline GroupedCall grouped_matmul_call(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_b, float beta) {
  return {.op = "grouped_matmul",
          .operands = grouped_matmul_operands(a, b, c),
          .trans_a = trans_b,
          .m = c.dim(1),
          .k = a.dim(1),
          .lda = b.dim(2),
          .ldb = a.dim(1),
          .ldc = c.dim(1),
          .beta = beta};
}

// grouped_weight_grad: dw[g] (K, N) += A_g B_g^T with A_g the group's rows of x (K, rows) and B_g those of dy (N,
// rows), the sum over the group's rows, all column-major.
inline GroupedCall grouped_weight_grad_call(const Tensor& dy, const Tensor& x, const Tensor& dw) {
  return {.op = "grouped_weight_grad",
          .operands = grouped_weight_grad_operands(dy, x, dw),
          .trans_b = true,
          .m = dw.dim(2),
          .n = dw.dim(1),
          .rows_are_depth = true,
          .lda = x.dim(1),
          .ldb = dy.dim(1),
          .ldc = dw.dim(2),
          .beta = 1.0f};
}

}  // namespace tandem::ops::cuda
