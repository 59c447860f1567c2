// The scratch the CUDA kernels allocate (backend.h's Scratch), for the planner; the kernels are in the .cu files
// beside this one. Not counted: CUB's radix-sort temporary in embedding_backward and cuDNN's per-graph attention
// workspace (both vary with the library version; a few MiB at model shapes).
#include "tandem/ops/backend.h"
#include "tandem/ops/cuda/workspace.h"

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

}  // namespace

const Scratch& scratch() {
  static const Scratch table = [] {
    Scratch s;
    s.attention_backward = &attention_backward_scratch;
    s.embedding_backward = &embedding_backward_scratch;
    s.fixed = kGemmWorkspaceBytes;
    return s;
  }();
  return table;
}

}  // namespace tandem::ops::cuda
