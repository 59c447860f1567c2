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
// Scales of several blocks (ops.h, "FP8"; fp8_scale.h lays them out as cuBLASLt reads them) go to cuBLASLt's scale
// modes (fp8_scale_modes): the pairs Hopper's kernels take are one scale each (SCALAR_32F), one per row each
// (OUTER_VEC_32F), and 1 x 128 with 128 x 128 or 1 x 128 blocks (VEC128_32F, BLK128x128_32F). An operand's grid is
// read in any mode whose layout is the same there (a 1 x 128 grid over K <= 128 is one per row, one 128 x 128 block
// is one scale), and the first pair both operands fit is taken. cuBLASLt (13.1, on an H200) has no algorithm for 1 x
// 128 scales of an operand whose rows are not a multiple of 4, so those are refused here, with a message.
#include <cstdint>
#include <string>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/gemm_plan.h"
#include "tandem/ops/cuda/grouped_gemm.h"
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

// The experts' grouped products on the rule's path (grouped_path.h).
void grouped_matmul(const Tensor& a, const Tensor& b, const Tensor& c, const std::vector<int64_t>& rows, bool trans_b,
                    float beta) {
  grouped_matmul_on(grouped_path(grouped_matmul_operands(a, b, c), b.dim(1), b.dim(2), rows), a, b, c, rows, trans_b,
                    beta);
}

void grouped_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw, const std::vector<int64_t>& rows) {
  grouped_weight_grad_on(grouped_path(grouped_weight_grad_operands(dy, x, dw), dw.dim(1), dw.dim(2), rows), dy, x, dw,
                         rows);
}

namespace {

void check_one_call(const char* op, const GroupedOperands& o, int64_t n, int64_t k, const std::vector<int64_t>& rows) {
  TANDEM_CHECK(grouped_path(o, n, k, rows, GroupedPath::OneCall) == GroupedPath::OneCall, op,
               ": cuBLAS's grouped call does not take this product (it needs a, b and c of one dtype, every matrix "
               "16-byte aligned, and some rows): ",
               dtype_name(o.in), " into ", dtype_name(o.out));
}

}  // namespace

// The loop: the groups' products one after another, each queued untimed (its rows change from step to step).
void grouped_matmul_on(GroupedPath path, const Tensor& a, const Tensor& b, const Tensor& c,
                       const std::vector<int64_t>& rows, bool trans_b, float beta) {
  device::CudaDevice& dev = cuda_device(c);
  if (path == GroupedPath::OneCall) {
    const GroupedCall call = grouped_matmul_call(a, b, c, trans_b, beta);
    check_one_call(call.op, call.operands, b.dim(1), b.dim(2), rows);
    queue_grouped_call(dev, call, rows);
    return;
  }
  for_each_group(b, rows, [&](const Tensor& w, int64_t first, int64_t n) {
    const Tensor ag = a.rows(first, n), cg = c.rows(first, n);
    queue_product(dev, {.op = "grouped_matmul",
                        .a = ag,
                        .b = w,
                        .c_in = cg,
                        .d = cg,
                        .trans_b = trans_b,
                        .beta = beta,
                        .time_candidates = false});
  });
}

void grouped_weight_grad_on(GroupedPath path, const Tensor& dy, const Tensor& x, const Tensor& dw,
                            const std::vector<int64_t>& rows) {
  device::CudaDevice& dev = cuda_device(dw);
  if (path == GroupedPath::OneCall) {
    const GroupedCall call = grouped_weight_grad_call(dy, x, dw);
    check_one_call(call.op, call.operands, dw.dim(1), dw.dim(2), rows);
    queue_grouped_call(dev, call, rows);
    return;
  }
  for_each_group(dw, rows, [&](const Tensor& w, int64_t first, int64_t n) {
    const Tensor dyg = dy.rows(first, n), xg = x.rows(first, n);
    queue_product(dev, {.op = "grouped_weight_grad",
                        .a = dyg,
                        .b = xg,
                        .c_in = w,
                        .d = w,
                        .trans_a = true,
                        .beta = 1.0f,
                        .time_candidates = false});
  });
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

namespace {

// Whether the scales of an operand (rows, K) in grid g (fp8_scale.h) are where cuBLASLt's scale mode m reads them.
bool fits(const Fp8ScaleGrid& g, int64_t rows, int64_t k, ScaleMode m) {
  switch (m) {
    case ScaleMode::Scalar:
      return g.single();
    case ScaleMode::OuterVec:  // index r
      return g.block_rows == 1 && g.cols == 1;
    case ScaleMode::Vec128:  // index (k / 128) * rows + r; cuBLASLt has no algorithm for rows not a multiple of 4
      return g.block_rows == 1 && rows % 4 == 0 && (g.block_cols == 128 || (g.cols == 1 && k <= 128));
    case ScaleMode::Blk128x128:  // index (r / 128) * round_up(ceil(K / 128), 4) + k / 128, or k / 128 for one row
      return (g.block_rows == 128 || (g.rows == 1 && rows <= 128)) &&
             (g.block_cols == 128 || (g.cols == 1 && k <= 128));
  }
  return false;
}

std::string blocks_str(Fp8Blocks b) {
  const auto extent = [](int64_t e) { return e > 0 ? std::to_string(e) : std::string("all"); };
  return extent(b.rows) + " x " + extent(b.cols);
}

// The scale modes of a (M, K) and b (N, K): the first pair of Hopper's that both grids fit, or a refusal naming them.
std::pair<ScaleMode, ScaleMode> fp8_scale_modes(const char* op, int64_t m, int64_t n, int64_t k, Fp8Blocks a_blocks,
                                                Fp8Blocks b_blocks) {
  using enum ScaleMode;
  constexpr std::pair<ScaleMode, ScaleMode> kPairs[] = {
      {Scalar, Scalar}, {OuterVec, OuterVec}, {Vec128, Blk128x128}, {Blk128x128, Vec128}, {Vec128, Vec128}};
  const Fp8ScaleGrid ga = fp8_scale_grid(m, k, a_blocks), gb = fp8_scale_grid(n, k, b_blocks);
  for (const auto& [ma, mb] : kPairs)
    if (fits(ga, m, k, ma) && fits(gb, n, k, mb)) return {ma, mb};
  TANDEM_FAIL(op, ": a (", m, ", ", k, ") in blocks of ", blocks_str(a_blocks), " with b (", n, ", ", k,
              ") in blocks of ", blocks_str(b_blocks),
              " is no pair of scales cuBLASLt's FP8 products take: one scale each, one per row each, 1 x 128 with "
              "128 x 128 or 1 x 128, or 128 x 128 with 1 x 128 (1 x 128 scales for a multiple of 4 rows)");
}

}  // namespace

void fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b, const Tensor& b_inv_scale,
                const Tensor& bias, const Tensor& c, const Tensor& d, bool fast_accum, Fp8Blocks a_blocks,
                Fp8Blocks b_blocks) {
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
  for (const auto& [name, t, rows, blocks] :
       {std::tuple<const char*, const Tensor&, int64_t, Fp8Blocks>{"a_inv_scale", a_inv_scale, m, a_blocks},
        {"b_inv_scale", b_inv_scale, n, b_blocks}}) {
    const int64_t count = fp8_scale_grid(rows, k, blocks).count;
    TANDEM_CHECK(t.numel() == count, op, ": ", name, " ", shape_str(t.shape()), " must hold ", count,
                 " element(s), one per block of ", blocks_str(blocks));
  }
  const auto [a_mode, b_mode] = fp8_scale_modes(op, m, n, k, a_blocks, b_blocks);
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
                  .fast_accum = fast_accum,
                  .a_mode = a_mode,
                  .b_mode = b_mode};
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
