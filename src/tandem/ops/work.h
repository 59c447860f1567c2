// The work of one op call, from its arguments alone: FLOPs of matrix products and attention, bytes read and written
// by every other op. The counting backend (counting.cc) adds it to a device's WorkLog; the op profile (profile.h)
// turns it into achieved TFLOP/s or GB/s.
#pragma once

#include <tuple>
#include <type_traits>
#include <vector>

#include "tandem/ops/backend.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops {

struct OpWork {
  double gemm_flops = 0;       // matmul with 16-bit operands
  double gemm_flops_fp32 = 0;  // matmul with fp32 operands
  double gemm_flops_fp8 = 0;   // fp8_matmul
  double grouped_flops = 0;    // grouped_matmul / grouped_weight_grad with 16-bit operands (fp32 ones: gemm_flops_fp32)
  double attention_flops = 0;  // causal attention, forward and backward
  // Of attention_flops: the backward's, and both again weighted for the time model (attention_head_weight).
  double attention_backward_flops = 0;
  double attention_weighted_flops = 0;
  double attention_weighted_backward_flops = 0;
  double bytes = 0;  // every other op
  double flops() const { return gemm_flops + gemm_flops_fp32 + gemm_flops_fp8 + grouped_flops + attention_flops; }
};

// A head of D < 128 runs attention on the tensor cores at about D / 128 of a 128-wide head's FLOP rate (the softmax's
// exponentials per score are the same work for half the products: cuDNN forward 291-369 against 553-609 TFLOP/s,
// backward 185-231 against 383-455 on an H100, docs/benchmarks.md), so the GPU's time model prices its FLOPs 128 / D
// times.
inline double attention_head_weight(double head_dim) { return head_dim < 128 ? 128.0 / head_dim : 1.0; }

// Adds attention's `flops` at head dim `head_dim` to w (an OpWork or a device::WorkLog), forward or backward.
template <class W>
void add_attention(W& w, double flops, double head_dim, bool backward) {
  const double weighted = flops * attention_head_weight(head_dim);
  w.attention_flops += flops;
  w.attention_weighted_flops += weighted;
  if (!backward) return;
  w.attention_backward_flops += flops;
  w.attention_weighted_backward_flops += weighted;
}

namespace work_detail {

inline double tensor_bytes(const Tensor& t) { return t.defined() ? static_cast<double>(t.nbytes()) : 0.0; }
inline double tensor_bytes(const std::vector<Tensor>& ts) {
  double s = 0;
  for (const Tensor& t : ts) s += tensor_bytes(t);
  return s;
}
template <class T>
double tensor_bytes(const T&) {
  return 0.0;
}

// Causal (grouped-query or multi-head) attention writing y (B, T, H*D): q k^T and p v, B H T^2 D multiply-adds
// each, half of them masked, whatever the number of kv heads.
inline double attention_gqa_forward_flops(const Tensor& y) {
  const double b = static_cast<double>(y.dim(0)), t = static_cast<double>(y.dim(1));
  return 2.0 * b * t * t * static_cast<double>(y.dim(2));
}

// The grouped products' FLOPs: 2 x each group's rows x its stacked (N, K) matrix.
inline double grouped_flops(const std::vector<int64_t>& rows, const Tensor& stack) {
  double r = 0;
  for (int64_t n : rows) r += static_cast<double>(n);
  return 2.0 * r * static_cast<double>(stack.dim(1)) * static_cast<double>(stack.dim(2));
}

}  // namespace work_detail

// The first tensor among an op's arguments (the first element of a tensor list counts), or null.
inline const Tensor* first_tensor() { return nullptr; }
template <class A, class... Rest>
const Tensor* first_tensor(const A& a, const Rest&... rest) {
  if constexpr (std::is_same_v<A, Tensor>) {
    return &a;
  } else if constexpr (std::is_same_v<A, std::vector<Tensor>>) {
    return a.empty() ? first_tensor(rest...) : &a.front();
  } else {
    return first_tensor(rest...);
  }
}

// Products and attention by their FLOPs (the linear ops also by the bytes of the bias and residual they add),
// AdamW by the 28 bytes per element it moves (reads value, gradient and moments, writes value and moments), every
// other op by the bytes of its tensors, each read or written once.
template <OpId id, class... A>
OpWork work_of(const A&... a) {
  OpWork w;
  if constexpr (id == OpId::copy_columns) {
    // The block it reads and writes, not the whole tables.
    const auto& [src, src_col, dst, dst_col, width] = std::tie(a...);
    w.bytes = 2.0 * static_cast<double>(rows_of(dst)) * static_cast<double>(width) * dtype_size(dst.dtype());
  } else if constexpr (id == OpId::matmul) {
    const auto& [x, y, c, trans_a, trans_b, beta] = std::tie(a...);
    const double m = static_cast<double>(rows_of(c)), n = static_cast<double>(cols_of(c));
    const double k = static_cast<double>(trans_a ? rows_of(x) : cols_of(x));
    (x.dtype() == DType::F32 ? w.gemm_flops_fp32 : w.gemm_flops) = 2.0 * m * n * k;
  } else if constexpr (id == OpId::grouped_matmul) {
    // Every group's product: 2 x its rows x the stack's matrix.
    const auto& [x, stack, c, rows, trans_b, beta] = std::tie(a...);
    (x.dtype() == DType::F32 ? w.gemm_flops_fp32 : w.grouped_flops) = work_detail::grouped_flops(rows, stack);
  } else if constexpr (id == OpId::grouped_weight_grad) {
    const auto& [dy, x, stack, rows] = std::tie(a...);
    (x.dtype() == DType::F32 ? w.gemm_flops_fp32 : w.grouped_flops) = work_detail::grouped_flops(rows, stack);
  } else if constexpr (id == OpId::linear_forward) {
    // The product's FLOPs; the epilogue's reads of bias and residual as bytes.
    const auto& [x, weight, bias, residual, y] = std::tie(a...);
    const double flops =
        2.0 * static_cast<double>(rows_of(y)) * static_cast<double>(cols_of(y)) * static_cast<double>(cols_of(x));
    (x.dtype() == DType::F32 ? w.gemm_flops_fp32 : w.gemm_flops) = flops;
    w.bytes = work_detail::tensor_bytes(bias) + work_detail::tensor_bytes(residual);
  } else if constexpr (id == OpId::linear_weight_grad) {
    // The product's FLOPs; the bias gradient is summed from the dy the product reads anyway.
    const auto& [dy, x, dweight, dbias] = std::tie(a...);
    const double flops = 2.0 * static_cast<double>(rows_of(dweight)) * static_cast<double>(cols_of(dweight)) *
                         static_cast<double>(rows_of(x));
    (x.dtype() == DType::F32 ? w.gemm_flops_fp32 : w.gemm_flops) = flops;
    w.bytes = work_detail::tensor_bytes(dbias);
  } else if constexpr (id == OpId::fp8_matmul) {
    // The product's FLOPs; the epilogue's reads of bias and c as bytes.
    const auto& [x, x_inv, y, y_inv, bias, c, d, fast, x_blocks, y_blocks] = std::tie(a...);
    w.gemm_flops_fp8 =
        2.0 * static_cast<double>(rows_of(d)) * static_cast<double>(cols_of(d)) * static_cast<double>(cols_of(x));
    w.bytes = work_detail::tensor_bytes(bias) + work_detail::tensor_bytes(c);
  } else if constexpr (id == OpId::attention_gqa_forward || id == OpId::attention_gqa_backward ||
                       id == OpId::attention_gqa_documents_forward || id == OpId::attention_gqa_documents_backward) {
    // (qkv, heads, kv_heads, [documents,] y, ...). The documents' attention is counted as the causal attention it
    // computes within (the masked-out scores are formed too). The backward (dV, dP, dQ, dK and the recomputed
    // scores) is 2.5 times the forward's products.
    constexpr bool documents =
        id == OpId::attention_gqa_documents_forward || id == OpId::attention_gqa_documents_backward;
    constexpr bool backward = id == OpId::attention_gqa_backward || id == OpId::attention_gqa_documents_backward;
    constexpr size_t y_at = documents ? 4 : 3;
    const Tensor& y = std::get<y_at>(std::tie(a...));
    const double head_dim = static_cast<double>(y.dim(2)) / static_cast<double>(std::get<1>(std::tie(a...)));
    add_attention(w, (backward ? 2.5 : 1.0) * work_detail::attention_gqa_forward_flops(y), head_dim, backward);
  } else if constexpr (id == OpId::adamw_step) {
    w.bytes = 28.0 * static_cast<double>(std::get<0>(std::tie(a...)).numel()) +
              work_detail::tensor_bytes(std::get<5>(std::tie(a...)));  // the rounded copy, when asked for
  } else {
    w.bytes = (0.0 + ... + work_detail::tensor_bytes(a));
  }
  return w;
}

}  // namespace tandem::ops
