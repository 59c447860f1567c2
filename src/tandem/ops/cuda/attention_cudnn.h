// cuDNN's fused attention (SDPA forward and backward graphs through the cudnn-frontend headers, which take H query
// heads over Hkv key/value heads and sum dk and dv over each group) for attention_gqa.cc's dispatch, bf16 and f16:
// the forward, and the backward whole or, deterministic where whole it would want more than
// kCudnnAttentionWorkspaceLimit, in blocks of query rows (scratch_sizes.h's rule, attention_cudnn_blocks.cc). Graphs
// are built once per shape and cached in a per-device context. Without the cudnn-frontend headers every call
// answers NotTaken.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"

namespace tandem::ops::cuda {

enum class CudnnAttention {
  Ran,       // done
  NotTaken,  // cuDNN does not take the dtypes, the shape or the pointers, or cannot build the graph: nothing written
  NoBlocks,  // the rule asks for blocks and cuDNN cannot build them: nothing written
};

// ops.h's attention_gqa_forward through cuDNN's graph.
CudnnAttention cudnn_attention_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse);

// ops.h's attention_gqa_backward through cuDNN: deterministic (unless TANDEM_NONDETERMINISTIC_ATTENTION=1), in the
// rule's blocks for `block_bytes` (cudnn_attention_blocking, with attention_block_bytes(block_bytes)) where it blocks.
CudnnAttention cudnn_attention_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                                        const Tensor& dy, const Tensor& dqkv, int64_t block_bytes);

}  // namespace tandem::ops::cuda
