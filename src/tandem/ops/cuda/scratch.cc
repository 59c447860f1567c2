// The scratch the CUDA kernels allocate (backend.h's Scratch), for the planner; the kernels are in the .cu files
// beside this one. Not counted: CUB's radix-sort temporary in embedding_backward and cuDNN's per-graph attention
// workspace (both vary with the library version; a few MiB at model shapes).
#include "tandem/ops/backend.h"
#include "tandem/ops/cuda/scratch_sizes.h"
#include "tandem/ops/cuda/workspace.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

// attention.cu: rowsum(dO * O) (B, H, T) f32.
int64_t attention_backward_scratch(const ScratchContext&, const Tensor& qkv, int heads, const Tensor&, const Tensor&,
                                   const Tensor&, const Tensor&) {
  return qkv.dim(0) * heads * qkv.dim(1) * 4;
}

// embedding.cu: the sort's keys and positions in and out, (3, N) i32.
int64_t embedding_backward_scratch(const ScratchContext&, const Tensor& ids, const Tensor&, const Tensor&, int64_t,
                                   int64_t) {
  return 3 * ids.numel() * 4;
}

// rmsnorm.cu: dgamma's (slices, C) f32 partials.
int64_t rmsnorm_backward_scratch(const ScratchContext&, const Tensor&, const Tensor& x, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&) {
  return rmsnorm_backward_scratch_bytes(rows_of(x), cols_of(x));
}

// attention_gqa.cu: rowsum(dO * O) (B, H, T) f32 (the plain kernels; cuDNN's workspace is not counted, as above).
int64_t attention_gqa_backward_scratch(const ScratchContext&, const Tensor& qkv, int heads, int, const Tensor&,
                                       const Tensor&, const Tensor&, const Tensor&) {
  return attention_gqa_backward_scratch_bytes(qkv.dim(0), heads, qkv.dim(1));
}

}  // namespace

const Scratch& scratch() {
  static const Scratch table = [] {
    Scratch s;
    s.attention_backward = &attention_backward_scratch;
    s.embedding_backward = &embedding_backward_scratch;
    s.rmsnorm_backward = &rmsnorm_backward_scratch;
    s.attention_gqa_backward = &attention_gqa_backward_scratch;
    s.fixed = kGemmWorkspaceBytes;
    return s;
  }();
  return table;
}

}  // namespace tandem::ops::cuda
