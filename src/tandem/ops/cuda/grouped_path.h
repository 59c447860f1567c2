// How the experts' grouped products (ops.h: grouped_matmul, grouped_weight_grad) run on CUDA, and THE rule choosing
// it, followed by the op (gemm.cc) and the planner's scratch (scratch.cc) alike, so the predicted memory stays exact.
// Two paths: the per-expert loop (one untimed cuBLASLt product per non-empty group, queued one after another) and
// one cublasGemmGroupedBatchedEx call over every non-empty group (grouped_gemm.cu), whose three arrays of device
// pointers (cuBLAS's A, B and C of each group, grouped_call.h) are written on the device into scratch from the device
// arena. Plain C++: every build compiles it (the planner plans GPUs anywhere).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/ops/cuda/grouped_call.h"

namespace tandem::ops::cuda {

enum class GroupedPath { Loop, OneCall };

// Whether cublasGemmGroupedBatchedEx takes these operands, from its documentation (cuBLAS 13):
// - types: with CUBLAS_COMPUTE_32F and f32 scales it takes A, B and C all bf16, all f16 or all f32; no f32 C for
//   16-bit inputs. So an f32 c or dw beside bf16 or f16 inputs (the training layer's f32 weight gradients) stays
//   on the loop;
// - alignment: for 16-bit inputs every matrix pointer should be 16-byte aligned (a looser rule by K exists, but
//   16 bytes is the one it names as safe): the bases, each group's stride and each row's stride in bytes are
//   multiples of 16, so every group's pointer is.
inline bool grouped_call_takes(const GroupedOperands& o) {
  if (o.in != o.out) return false;
  for (const PointerStep& s : {o.a, o.b, o.c}) {
    if (reinterpret_cast<uintptr_t>(s.base) % 16 != 0 || s.group_bytes % 16 != 0 || s.row_bytes % 16 != 0) return false;
  }
  return true;
}

inline int64_t nonempty_groups(const std::vector<int64_t>& rows) {
  int64_t n = 0;
  for (int64_t r : rows) n += r > 0 ? 1 : 0;
  return n;
}

// The path where the environment names none: the one call. Measured against the loop on an H100 (2026-12-05): the
// 48-layer Qwen3-30B-A3B with LoRA (every expert product in the call) trains 9,129 tok/s against 7,542, the same
// losses to the bit; ops_check --family moe prints both paths product by product.
inline constexpr GroupedPath kGroupedPathDefault = GroupedPath::OneCall;

// The path asked for: TANDEM_GROUPED_GEMM=one_call or =loop in the environment (read once, here), else
// kGroupedPathDefault.
inline GroupedPath grouped_path_asked() {
  static const GroupedPath asked = [] {
    const char* v = std::getenv("TANDEM_GROUPED_GEMM");
    const std::string named = v ? v : "";
    if (named == "one_call") return GroupedPath::OneCall;
    return named == "loop" ? GroupedPath::Loop : kGroupedPathDefault;
  }();
  return asked;
}

// THE rule: the one call where it is asked for (by default, kGroupedPathDefault), cuBLAS takes the operands,
// some group has rows and the experts' (N, K) matrices are not empty; the loop otherwise.
inline GroupedPath grouped_path(const GroupedOperands& o, int64_t n, int64_t k, const std::vector<int64_t>& rows,
                                GroupedPath asked = grouped_path_asked()) {
  if (asked == GroupedPath::Loop || n <= 0 || k <= 0 || nonempty_groups(rows) == 0) return GroupedPath::Loop;
  return grouped_call_takes(o) ? GroupedPath::OneCall : GroupedPath::Loop;
}

// The one call's scratch: its three arrays of device pointers (cuBLAS's A, B and C), one 8-byte pointer per
// non-empty group each; none on the loop.
inline int64_t grouped_pointer_bytes(const std::vector<int64_t>& rows) { return 3 * 8 * nonempty_groups(rows); }
inline int64_t grouped_scratch_bytes(GroupedPath path, const std::vector<int64_t>& rows) {
  return path == GroupedPath::OneCall ? grouped_pointer_bytes(rows) : 0;
}

}  // namespace tandem::ops::cuda
