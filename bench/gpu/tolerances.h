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
// fp8_matmul on the GPU against the CPU op on the same FP8 operands. Each product of two FP8 values is exact in fp32,
// so only the sums differ: the CPU adds in fp32 (OpenBLAS's order), the tensor cores add each short run of K in their
// own reduced precision (about 14 bits kept) before cuBLASLt promotes the partial sums to fp32, and a bf16 or f16 d
// rounds once, where an ulp's flip is 4e-3 of the element. A lost scale (a power of two) gives >= 0.5, a lost bias or
// c (drawn as large as the product) about 0.7. Measured on an H200: 7e-5 (f32 d) to 6e-4 (bf16 d).
inline constexpr double kOpFp8Matmul = 2e-3;
// With CUBLASLT_MATMUL_DESC_FAST_ACCUM the partial sums stay in the tensor cores' precision for all of K (up to ~2% on
// single elements at K = 4096 as reported for Hopper; norm-wise, measured on an H200: 1.2e-3 to 1.9e-3).
inline constexpr double kOpFp8MatmulFastAccum = 2e-2;
// The FP8 linear layer (y = x W^T, dx = dy W, dW = dy^T x with per-tensor scales) against an fp32 reference, as a
// signal-to-quantisation-noise ratio in dB (ops_check prints it; a row's relative error is 10^(-SQNR / 20)).
// Rounding to a format of m mantissa bits leaves a noise of about 4^-m / 28 of the signal's power (RNE, values spread
// over a binade): e4m3 (m = 3) ~32 dB per tensor, e5m2 (m = 2) ~26 dB. A product's noise is the sum of its two
// operands' (independent errors): e4m3 x e4m3 ~29 dB, e5m2 x e4m3 ~25.5 dB (24.5 dB in a float64 simulation of
// Gaussian operands), so a gradient product in e5m2 cannot reach the e4m3 products' bound and gets its own. Measured
// on an H200 at the four Llama-3-8B shapes: 28.4-28.5 dB for e4m3 products (y with fast accumulation included),
// 24.6 dB for dx and dW with dy in e5m2; bf16 gives 50.8-52.6 dB.
inline constexpr double kFp8SqnrDb = 25.0;      // y, and dx / dW with dy in e4m3
inline constexpr double kFp8SqnrE5m2Db = 22.0;  // dx / dW with dy in e5m2 (the usual recipe's gradient format)
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
    {"op_fp8_matmul", kOpFp8Matmul,
     "exact FP8 products; only the order and the tensor cores' partial-sum precision of the sums differ"},
    {"op_fp8_matmul_fast_accum", kOpFp8MatmulFastAccum,
     "as op_fp8_matmul, partial sums kept in the tensor cores' reduced precision for all of K"},
    {"fp8_sqnr_db", kFp8SqnrDb,
     "FP8 linear layer vs fp32 (a minimum, in dB), e4m3 operands: two e4m3 roundings, ~29 dB (28.5 measured)"},
    {"fp8_sqnr_e5m2_db", kFp8SqnrE5m2Db,
     "as fp8_sqnr_db, dy in e5m2: 2 mantissa bits, ~26 dB for dy alone, 24.6 dB measured for dx and dW"},
    {"loss_bf16", kLossBf16,
     "20 steps of a 4-block gpt: different kernels' rounding compounds over steps (measured up to 1.1e-3)"},
    {"loss_fp16", kLossFp16, "as loss_bf16, with dynamic loss scaling (measured up to 1.7e-4)"},
    {"loss_bf16_llama", kLossLlamaBf16,
     "20 steps of a 2-block llama (GQA, RMSNorm, rotary, SwiGLU): the same compounding as loss_bf16, same bound"},
    {"loss_fp16_llama", kLossLlamaFp16, "as loss_bf16_llama, with dynamic loss scaling"},
};

}  // namespace tandem::gpu_check
