// The cuBLASLt product behind every CUDA GEMM op (gemm.cc: matmul, linear_forward, linear_weight_grad, fp8_matmul):
// one description of a row-major product, queued through a per-device cache of descriptors and chosen algorithms
// (gemm_plan.cc says how they are chosen). Host code only; no cuBLASLt type appears here (cudaDataType_t is the
// CUDA runtime's).
#pragma once

#include <library_types.h>

#include "tandem/core/tensor.h"
#include "tandem/device/cuda/cuda_device.h"

namespace tandem::ops::cuda {

// What the product adds in its epilogue.
enum class Epilogue : int {
  None = 0,
  Bias = 1,       // D += bias broadcast over D's columns (our rows): a bias per output feature
  BiasGradB = 2,  // bias gradient = the sums of cuBLASLt's op(B) over K, one per column of D
};

// How an FP8 operand's scales are laid out (fp8_scale.h's layouts, which are cuBLASLt's scale modes for an operand
// (R, K) with K contiguous): one for the tensor, one per row (R), one per row and 128 columns of K (index
// (k / 128) * R + r), or one per 128 x 128 tile (index (r / 128) * round_up(ceil(K / 128), 4) + k / 128).
enum class ScaleMode : int {
  Scalar = 0,      // CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
  OuterVec = 1,    // CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
  Vec128 = 2,      // CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
  Blk128x128 = 3,  // CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
};

// D = op(a) op(b) * a_scale * b_scale + beta C + the epilogue, row-major, summed in fp32 and rounded once into d.
// a and b hold f32, bf16 or f16 (one dtype for both), or FP8 (e4m3 / e5m2, then in the TN form: trans_a false and
// trans_b true, with both scales given). C is `c_in`, of d's dtype and shape; it may be d itself (cuBLASLt's in-place
// form) and is not read when beta is 0.
struct Product {
  const char* op;  // the op's name, for errors
  const Tensor& a;
  const Tensor& b;
  const Tensor& c_in;
  const Tensor& d;
  bool trans_a = false, trans_b = false;
  float beta = 0.0f;
  Epilogue epilogue = Epilogue::None;
  const void* bias = nullptr;  // the epilogue's vector: the bias (d's dtype), or the (M) f32 gradient it writes
  // FP8 only: device pointers to the factors a's and b's values are multiplied by (their inverse scales), one f32
  // each or one per block as a_mode and b_mode lay them out, and whether the tensor cores may keep partial sums in
  // their own reduced precision (where cuBLASLt has no such algorithm for the scale modes, they do not).
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  bool fast_accum = false;
  ScaleMode a_mode = ScaleMode::Scalar;
  ScaleMode b_mode = ScaleMode::Scalar;
  // Time cuBLASLt's candidates at the plan's first call (gemm_plan.cc); false: the heuristic's first choice runs, for
  // shapes seen once or twice (the experts' products, whose rows change every step), where timing costs more than
  // it could win.
  bool time_candidates = true;
};

// Queues the product on the device's compute stream. m, n, k > 0. Returns false, queuing nothing, when cuBLASLt has no
// algorithm with the epilogue (the caller then does without it); without an epilogue, a missing algorithm throws.
bool queue_product(device::CudaDevice& dev, const Product& p);

// The CUDA type of a float dtype (f32, bf16, f16, e4m3, e5m2) as cuBLAS names it; other dtypes throw.
cudaDataType_t gemm_data_type(DType t);

// The device's cuBLASLt workspace (kGemmWorkspaceBytes, workspace.h), made with the device's first product and kept:
// the grouped call (grouped_gemm.h) runs in it too, on the same stream.
void* gemm_workspace(device::CudaDevice& dev);

}  // namespace tandem::ops::cuda
