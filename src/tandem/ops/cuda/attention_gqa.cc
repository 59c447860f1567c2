// CUDA causal grouped-query self-attention (ops.h): which kernels run. cuDNN's fused attention (attention_cudnn.h)
// for bf16 and f16, our flash kernels (attention_flash.h: memory linear in T) where cuDNN's deterministic backward
// would not fit even in its smallest blocks and for attention kept inside documents, and the plain kernels
// (attention_gqa.cu) for f32 and for shapes or alignments neither takes. One rule picks the path per shape and block
// bytes, attention_uses_flash (scratch_sizes.h), which the planner's estimates follow too; the forward and the
// backward of a shape take the same one. Multi-head attention (ops.h's attention_forward / attention_backward)
// reaches it as the case Hkv = H: the same fused qkv layout.
#include "tandem/ops/cuda/attention_cudnn.h"
#include "tandem/ops/cuda/attention_flash.h"
#include "tandem/ops/cuda/attention_gqa_plain.h"
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/scratch_sizes.h"

namespace tandem::ops::cuda {

namespace {

FlashDims flash_dims(const Tensor& qkv, int heads, int kv_heads) {
  const int64_t d = qkv.dim(2) / (heads + 2 * static_cast<int64_t>(kv_heads));
  return FlashDims{qkv.dim(0), qkv.dim(1), heads, kv_heads, static_cast<int>(d)};
}

// Whether this call runs the flash kernels: the rule (scratch_sizes.h) says so for its shape and block bytes, every
// operand has qkv's dtype, the grid takes the shape, and the pointers sit on 16-byte boundaries (else the plain kernels
// run; their lse is the flash kernels' too, so a forward and a backward that split across the two still agree).
bool flash_runs(const FlashDims& s, bool documents, int64_t block_bytes, std::initializer_list<const Tensor*> operands,
                std::initializer_list<const void*> pointers) {
  const DType t = (*operands.begin())->dtype();
  for (const Tensor* x : operands)
    if (x->dtype() != t) return false;
  return attention_uses_flash(t, s.b, s.h, s.kv, s.t, s.d, documents, block_bytes) && flash_attention_supported(s) &&
         flash_attention_aligned(pointers);
}

void flash_forward(const FlashDims& s, const Tensor& qkv, const Tensor* documents, const Tensor& y, const Tensor& lse) {
  device::CudaDevice& dev = cuda_device(y);
  TANDEM_CUDA_CHECK(flash_attention_forward(s, qkv.raw(), y.raw(), lse.f32(), documents ? documents->i32() : nullptr,
                                            qkv.dtype() == DType::F16, dev.compute_stream()));
}

void flash_backward(const FlashDims& s, const Tensor& qkv, const Tensor* documents, const Tensor& y, const Tensor& lse,
                    const Tensor& dy, const Tensor& dqkv) {
  device::CudaDevice& dev = cuda_device(dqkv);
  Tensor dsum = Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "attention_gqa_backward rowsum(dO * O)");
  TANDEM_CHECK(static_cast<int64_t>(dsum.nbytes()) == attention_gqa_backward_scratch_bytes(s.b, s.h, s.t) &&
                   static_cast<int64_t>(dsum.nbytes()) == flash_attention_backward_scratch_bytes(s),
               "attention_gqa_backward: flash scratch size differs from the planner's (scratch_sizes.h)");
  TANDEM_CUDA_CHECK(flash_attention_backward(s, qkv.raw(), y.raw(), lse.f32(), dy.raw(), dqkv.raw(), dsum.f32(),
                                             documents ? documents->i32() : nullptr, qkv.dtype() == DType::F16,
                                             dev.compute_stream()));
  // dsum goes back to the arena now; its next user is queued after these kernels on the compute stream.
}

}  // namespace

void attention_gqa_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                           int64_t block_bytes) {
  const FlashDims fs = flash_dims(qkv, heads, kv_heads);
  if (flash_runs(fs, false, block_bytes, {&qkv, &y}, {qkv.raw(), y.raw(), lse.raw()}))
    return flash_forward(fs, qkv, nullptr, y, lse);
  if (cudnn_attention_forward(qkv, heads, kv_heads, y, lse) == CudnnAttention::Ran) return;
  attention_gqa_forward_plain(qkv, heads, kv_heads, y, lse);
}

void attention_gqa_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                            const Tensor& dy, const Tensor& dqkv, int64_t block_bytes) {
  const FlashDims fs = flash_dims(qkv, heads, kv_heads);
  if (flash_runs(fs, false, block_bytes, {&qkv, &y, &dy, &dqkv}, {qkv.raw(), y.raw(), lse.raw(), dy.raw(), dqkv.raw()}))
    return flash_backward(fs, qkv, nullptr, y, lse, dy, dqkv);
  switch (cudnn_attention_backward(qkv, heads, kv_heads, y, lse, dy, dqkv, block_bytes)) {
    case CudnnAttention::Ran:
      return;
    case CudnnAttention::NoBlocks:
      TANDEM_CHECK(flash_attention_supported(fs),
                   "attention_gqa_backward: cuDNN cannot run the deterministic backward in blocks for (B=", fs.b,
                   ", H=", fs.h, ", Hkv=", fs.kv, ", T=", fs.t, ", D=", fs.d, ") ", dtype_name(qkv.dtype()),
                   ", and the flash kernels cannot take it");
      return flash_backward(fs, qkv, nullptr, y, lse, dy, dqkv);
    case CudnnAttention::NotTaken:
      break;
  }
  attention_gqa_backward_plain(qkv, heads, kv_heads, y, lse, dy, dqkv);
}

// Attention kept inside documents (data.document_mask): the flash kernels alone (cuDNN has no graph for it here);
// shapes they cannot take (f32, D other than 64 or 128) are refused.
void attention_gqa_documents_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                                     const Tensor& y, const Tensor& lse) {
  const FlashDims fs = flash_dims(qkv, heads, kv_heads);
  TANDEM_CHECK(flash_runs(fs, true, 0, {&qkv, &y}, {qkv.raw(), y.raw(), lse.raw(), documents.raw()}),
               "attention_gqa_documents_forward: the CUDA backend keeps attention inside documents for bf16 or f16 "
               "data with head dim 64 or 128 only (here ",
               dtype_name(qkv.dtype()), ", D = ", fs.d, "); run it on the CPU backend, or without documents");
  flash_forward(fs, qkv, &documents, y, lse);
}

void attention_gqa_documents_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                                      const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dqkv) {
  const FlashDims fs = flash_dims(qkv, heads, kv_heads);
  TANDEM_CHECK(
      flash_runs(fs, true, 0, {&qkv, &y, &dy, &dqkv},
                 {qkv.raw(), y.raw(), lse.raw(), dy.raw(), dqkv.raw(), documents.raw()}),
      "attention_gqa_documents_backward: the CUDA backend keeps attention inside documents for bf16 or f16 data "
      "with head dim 64 or 128 only (here ",
      dtype_name(qkv.dtype()), ", D = ", fs.d, "); run it on the CPU backend, or without documents");
  flash_backward(fs, qkv, &documents, y, lse, dy, dqkv);
}

}  // namespace tandem::ops::cuda
