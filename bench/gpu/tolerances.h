// The GPU check's tolerances, stated once: the bound of every ops_check row (a CUDA op against the CPU op on the
// same inputs, ||gpu - cpu|| / ||cpu|| over all elements) and of bench/gpu_check.sh's end-to-end comparison (the
// largest relative difference of any step's loss between a GPU run and the CPU backend at the same precision).
// ops_check includes this header; gpu_check.sh reads the table from `ops_check --print-tolerances`.
#pragma once

namespace tandem::gpu_check {

// Ops, by the dtype under test.
inline constexpr double kOpF32 = 1e-5;
inline constexpr double kOpBf16 = 2e-2;
inline constexpr double kOpF16 = 5e-3;
// sum_squares: relative error of the sum itself.
inline constexpr double kOpSumSquares = 1e-9;
// A cast's bound as a fraction of the target dtype's op bound.
inline constexpr double kOpCastFraction = 1e-2;
// Rows that pass or fail outright (bitwise reruns, an inf that must come through, errors that must be raised).
inline constexpr double kOpExact = 0.0;
// End to end: a tiny gpt for 20 steps on GPUs against the CPU backend.
inline constexpr double kLossBf16 = 2e-2;
inline constexpr double kLossFp16 = 2e-2;
// End to end: a tiny grouped-query llama (tied and untied) for 20 steps on 1 GPU against the CPU backend.
inline constexpr double kLossLlamaBf16 = 2e-2;
inline constexpr double kLossLlamaFp16 = 2e-2;

struct Tolerance {
  const char* name;  // the key ops_check --print-tolerances prints
  double bound;
  const char* why;
};

inline constexpr Tolerance kTolerances[] = {
    {"op_f32", kOpF32, "both sides fp32; only the summation orders differ"},
    {"op_bf16", kOpBf16,
     "8 significant bits: storage rounding alone is ~4e-3 per element, fused kernels round more inside"},
    {"op_f16", kOpF16, "11 significant bits: ~5e-4 per element"},
    {"op_sum_squares", kOpSumSquares, "identical inputs, summed in double on both sides"},
    {"op_cast_fraction", kOpCastFraction,
     "of the target dtype's bound: casts round to nearest even as the host does, so the error should be 0"},
    {"op_exact", kOpExact, "bitwise reruns, inf propagation and deferred errors pass or fail outright"},
    {"loss_bf16", kLossBf16,
     "20 steps of a 4-block gpt: different kernels' rounding compounds over steps (measured up to 1.1e-3)"},
    {"loss_fp16", kLossFp16, "as loss_bf16, with dynamic loss scaling (measured up to 1.7e-4)"},
    {"loss_bf16_llama", kLossLlamaBf16,
     "20 steps of a 2-block llama (GQA, RMSNorm, rotary, SwiGLU): the same compounding as loss_bf16, same bound"},
    {"loss_fp16_llama", kLossLlamaFp16, "as loss_bf16_llama, with dynamic loss scaling"},
};

}  // namespace tandem::gpu_check
