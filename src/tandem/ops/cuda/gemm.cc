// CUDA matrix products through cuBLASLt (the product itself, its plans and algorithm choice: gemm_plan.cc): a and b
// in X (f32, bf16, f16), c in X or f32, fp32 accumulation; and the FP8 product.
// The linear layer's ops use cuBLASLt's epilogues: linear_forward adds the bias (CUBLASLT_EPILOGUE_BIAS) and the
// residual (as the C operand with beta 1, D being y) before the one rounding; linear_weight_grad takes the bias
// gradient from the weight gradient's product (CUBLASLT_EPILOGUE_BGRADB: the column sums of dy, which is cuBLASLt's
// B there, over the product's K = N rows), which cuBLASLt writes rather than adds: into f32 scratch, then added to
// dbias. Where cuBLASLt has no algorithm with the epilogue, the ops fall back to matmul and the separate passes.
//
// fp8_matmul: FP8 a and b in the TN form, their inverse scales as cuBLASLt's A and B scale pointers (read on the
// device, so no host sync), the bias in the BIAS epilogue and c as C with beta 1. The FP8 type combinations
// cublasLtMatmul takes (CUBLAS_COMPUTE_32F, scale type f32; the cuBLAS documentation's table for cublasLtMatmul, and
// cublasLt.h on CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE): A/B e4m3 x e4m3, e4m3 x e5m2 or e5m2 x e4m3 (no e5m2 x e5m2),
// C = D bf16, f16 or f32 (or an FP8 D, which this op does not write), with the bias in D's type for a bf16 or f16 D
// and in bf16 for an f32 D. This op's bias has d's dtype, so an f32 d's bias is added after the product (add_bias).
// cuBLASLt's A transposed and
// its B not (our TN form), matrices 16-byte aligned, K and N multiples of 16.
#include <cstdint>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/gemm_plan.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {

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
  queue_product(
      dev, {.op = "matmul", .a = a, .b = b, .c_in = c, .d = c, .trans_a = trans_a, .trans_b = trans_b, .beta = beta});
}

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                    const Tensor& y) {
  const char* op = "linear_forward";
  check_float(op, "x", x);
  check_dtype(op, "weight", weight, x.dtype());
  check_dtype(op, "y", y, x.dtype());
  if (bias.defined()) check_dtype(op, "bias", bias, x.dtype());
  if (residual.defined()) check_dtype(op, "residual", residual, x.dtype());
  const int64_t m = rows_of(y), n = cols_of(y), k = cols_of(x);
  if (m == 0 || n == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  const Tensor rows = y.view({m, n});  // (N, out)
  if (k > 0) {
    // One product: y = x W^T + residual (C, beta 1) + bias (epilogue), rounded once.
    const Product p{.op = op,
                    .a = x,
                    .b = weight,
                    .c_in = residual.defined() ? residual : y,
                    .d = y,
                    .trans_b = true,
                    .beta = residual.defined() ? 1.0f : 0.0f,
                    .epilogue = bias.defined() ? Epilogue::Bias : Epilogue::None,
                    .bias = bias.defined() ? bias.raw() : nullptr};
    if (queue_product(dev, p)) return;
    // No algorithm with the bias epilogue: the product with the residual, then the bias as its own pass.
    Product plain = p;
    plain.epilogue = Epilogue::None;
    plain.bias = nullptr;
    queue_product(dev, plain);
    add_bias(rows, bias);
    return;
  }
  matmul(x, weight, y, false, true, 0.0f);  // an empty sum: zeros
  if (bias.defined()) add_bias(rows, bias);
  if (residual.defined()) add(rows, residual.view({m, n}), rows);
}

void linear_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dweight, const Tensor& dbias) {
  const char* op = "linear_weight_grad";
  check_float(op, "dy", dy);
  check_dtype(op, "x", x, dy.dtype());
  TANDEM_CHECK(dweight.dtype() == dy.dtype() || dweight.dtype() == DType::F32, op, ": dweight holds ",
               dtype_name(dweight.dtype()), ", expected ", dtype_name(dy.dtype()), " or f32");
  if (dbias.defined()) check_dtype(op, "dbias", dbias, DType::F32);
  const int64_t rows = rows_of(dy);
  if (rows_of(dweight) == 0 || cols_of(dweight) == 0 || rows == 0) {
    matmul(dy, x, dweight, true, false, 1.0f);  // nothing to add (or an empty matrix)
    return;
  }
  device::CudaDevice& dev = cuda_device(dweight);
  // The bias gradient as an epilogue needs it in the product's output type: f32 dweight (the training case).
  if (dbias.defined() && dweight.dtype() == DType::F32) {
    Tensor part = Tensor::empty(dbias.shape(), DType::F32, dev, "linear_weight_grad bias scratch");  // (out)
    if (queue_product(dev, {.op = op,
                            .a = dy,
                            .b = x,
                            .c_in = dweight,
                            .d = dweight,
                            .trans_a = true,
                            .beta = 1.0f,
                            .epilogue = Epilogue::BiasGradB,
                            .bias = part.raw()})) {
      axpy(1.0f, part, dbias);
      return;
    }
  }
  matmul(dy, x, dweight, true, false, 1.0f);
  if (dbias.defined()) bias_backward(dy.view({rows, cols_of(dy)}), dbias);
}

void fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b, const Tensor& b_inv_scale,
                const Tensor& bias, const Tensor& c, const Tensor& d, bool fast_accum) {
  const char* op = "fp8_matmul";
  const auto fp8 = [](DType t) { return t == DType::E4M3 || t == DType::E5M2; };
  TANDEM_CHECK(fp8(a.dtype()) && fp8(b.dtype()) && (a.dtype() == DType::E4M3 || b.dtype() == DType::E4M3), op,
               ": a holds ", dtype_name(a.dtype()), " and b ", dtype_name(b.dtype()),
               "; cuBLASLt's FP8 products take e4m3 x e4m3, e4m3 x e5m2 or e5m2 x e4m3");
  check_float(op, "d", d);
  check_dtype(op, "a_inv_scale", a_inv_scale, DType::F32);
  check_dtype(op, "b_inv_scale", b_inv_scale, DType::F32);
  if (c.defined()) check_dtype(op, "c", c, d.dtype());
  if (bias.defined()) check_dtype(op, "bias", bias, d.dtype());
  const int64_t m = rows_of(d), n = cols_of(d), k = cols_of(a);
  if (m == 0 || n == 0) return;
  TANDEM_CHECK(fp8_shape_ok(m, n, k), op, ": cuBLASLt's FP8 kernels need K and N positive multiples of 16; got M ", m,
               ", N ", n, ", K ", k);
  device::CudaDevice& dev = cuda_device(d);
  // An f32 d's bias would have to be bf16 in the epilogue: it is added in a pass of its own instead.
  const bool epilogue_bias = bias.defined() && d.dtype() != DType::F32;
  const Product p{.op = op,
                  .a = a,
                  .b = b,
                  .c_in = c.defined() ? c : d,
                  .d = d,
                  .trans_b = true,
                  .beta = c.defined() ? 1.0f : 0.0f,
                  .epilogue = epilogue_bias ? Epilogue::Bias : Epilogue::None,
                  .bias = epilogue_bias ? bias.raw() : nullptr,
                  .a_scale = a_inv_scale.f32(),
                  .b_scale = b_inv_scale.f32(),
                  .fast_accum = fast_accum};
  if (queue_product(dev, p) && (epilogue_bias || !bias.defined())) return;
  if (epilogue_bias) {  // no algorithm with the bias epilogue: the product with c alone
    Product plain = p;
    plain.epilogue = Epilogue::None;
    plain.bias = nullptr;
    queue_product(dev, plain);
  }
  add_bias(d.view({m, n}), bias);
}

}  // namespace tandem::ops::cuda
