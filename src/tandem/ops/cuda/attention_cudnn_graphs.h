// The cuDNN graphs behind grouped-query attention, shared by the files that build and run them:
// attention_cudnn.cc (the graphs, the whole forward and backward, the workspace the planner asks for) and
// attention_cudnn_blocks.cc (the deterministic backward in blocks of query rows). Internal to the CUDA backend, and
// only where the cudnn-frontend headers are (TANDEM_HAVE_CUDNN_FRONTEND); attention_cudnn.h is what the dispatch in
// attention_gqa.cc sees.
//
// No copies around cuDNN: with W = (H + 2 Hkv) D, q is a (B, H, T, D) view of the fused qkv (B, T, W) buffer with
// strides (T*W, D, W, 1), k and v (B, Hkv, T, D) views with the same strides starting H*D and (H + Hkv) D elements
// in; y and dy are (B, H, T, D) views of (B, T, H*D) (strides T*H*D, D, H*D, 1); dq, dk and dv are written straight
// into dqkv with qkv's strides; lse (B, H, T) is cuDNN's fp32 "stats" output as a (B, H, T, 1) tensor.
#pragma once

#if !TANDEM_HAVE_CUDNN_FRONTEND
#error "attention_cudnn_graphs.h needs the cudnn-frontend headers (TANDEM_HAVE_CUDNN_FRONTEND)"
#endif

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "tandem/core/tensor.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/scratch_sizes.h"

namespace tandem::ops::cuda::cudnn_attention {

namespace fe = cudnn_frontend;

// Tensor uids in the variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeqQ, kSeqKv };

// (backward, dtype, B, H, Hkv, T, rows, D, head groups, block part)
using GraphKey = std::array<int64_t, 10>;

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;  // null when cuDNN cannot run this shape
  int64_t workspace = 0;
};

// One cuDNN handle on the compute stream and the graphs built so far, per device. The backward is cuDNN's
// deterministic algorithm (the same bits every run), unless TANDEM_NONDETERMINISTIC_ATTENTION=1 is in the
// environment: then the other one, which is not, to measure what the rule costs.
struct GqaAttentionContext {
  explicit GqaAttentionContext(device::CudaDevice& dev) {
    TANDEM_CUDNN_CHECK(cudnnCreate(&handle));
    TANDEM_CUDNN_CHECK(cudnnSetStream(handle, dev.compute_stream()));
    deterministic = attention_deterministic();
  }
  ~GqaAttentionContext() {
    graphs.clear();
    if (handle) cudnnDestroy(handle);
  }
  GqaAttentionContext(const GqaAttentionContext&) = delete;
  GqaAttentionContext& operator=(const GqaAttentionContext&) = delete;

  cudnnHandle_t handle = nullptr;
  bool deterministic = true;
  std::map<GraphKey, CachedGraph> graphs;
  std::mutex mu;
};

// The whole attention (rows 0), or the backward's graph for blocks of `rows` query rows (scratch_sizes.h): queries
// [keys - rows, keys) against keys [0, keys), the causal mask aligned to the bottom right, the graph's keys all T and
// each block's own given at run time (cuDNN's padding mask: per batch element, the query and key lengths). A block's
// graph may take one of `groups` groups of the heads, H / groups query heads over Hkv / groups kv heads, run in turn
// (scratch_sizes.h). The buffers keep their (B, T, ...) strides either way. A split block (scratch_sizes.h) runs two
// graphs of its own parts: its rows against the keys before them (kBefore: no mask, the keys cut by the padding mask)
// and its diagonal square (kDiagonal: `rows` keys from the block's first, the causal mask at the top left, dq written
// to a (B, rows, H D) buffer beside).
enum BlockPart : int64_t { kWholeBlock = 0, kBefore = 1, kDiagonal = 2 };
struct GqaShape {
  int64_t b, h, kv, t, d;
  int64_t rows = 0;
  int64_t groups = 1;
  int64_t part = kWholeBlock;
  int64_t width() const { return (h + 2 * kv) * d; }  // W
  int64_t q_rows() const { return rows ? rows : t; }
  int64_t keys() const { return part == kDiagonal ? rows : t; }  // the graph's keys
  int64_t graph_h() const { return h / groups; }                 // the query heads one graph takes
  int64_t graph_kv() const { return kv / groups; }               // and its kv heads
};

inline GqaShape shape_of(const Tensor& qkv, int heads, int kv_heads) {
  const int64_t d = qkv.dim(2) / (heads + 2 * static_cast<int64_t>(kv_heads));
  return GqaShape{qkv.dim(0), heads, kv_heads, qkv.dim(1), d};
}

// Element offsets of k and v in a row of qkv.
inline int64_t k_offset(const GqaShape& s) { return s.h * s.d; }
inline int64_t v_offset(const GqaShape& s) { return (s.h + s.kv) * s.d; }

// The cached graph for this shape, built on first use; null graph when cuDNN cannot run it (reported once).
const CachedGraph& graph_for(GqaAttentionContext& ctx, bool backward, const GqaShape& s, DType t);

// cuDNN wants the shapes of cudnn_attention_shape (scratch_sizes.h) and every operand on a 16-byte boundary (q, k
// and v start inside one row of qkv).
bool cudnn_can_take(DType t, std::initializer_list<const void*> pointers, const GqaShape& s);

// Runs a whole graph with a workspace of its own, freed when it returns (queued after the graph).
void run(GqaAttentionContext& ctx, const CachedGraph& entry, device::CudaDevice& dev,
         std::unordered_map<int64_t, void*>& pack);

// `elements` elements of t's dtype past its start.
inline char* offset(const Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}

// "(B=1, H=32, Hkv=8, T=131072, D=128) bf16, blocks of 4096 query rows, ...": for messages.
std::string shape_text(const GqaShape& s, DType t);

// The blocked backward's graphs (scratch_sizes.h), built on first use, each over one of `b.groups` head groups:
// those of a whole-height block (`before` and `diagonal` where it is split, else `full`: the bottom-right mask) and of
// a shorter last block if T needs one (`last`, bottom-right). `widest` is the largest workspace of those that run, -1
// when cuDNN cannot run them. A split that cuDNN cannot build runs unsplit.
struct BlockGraphs {
  const CachedGraph *full = nullptr, *last = nullptr, *before = nullptr, *diagonal = nullptr;
  bool split = false;
  int64_t widest = -1;
};
BlockGraphs block_graphs(GqaAttentionContext& ctx, const GqaShape& s, DType t, const CudnnAttentionBlocks& b);

// The deterministic backward in blocks of query rows (scratch_sizes.h), head group after head group: each block's dq
// rows go into dqkv (a split block's two parts' added there in f32), its dk and dv (keys [0, a + rows)) into dqkv's k
// and v columns, summed into an f32 accumulator in block order; the last block's are added to the sums and rounded
// into dqkv. One allocation holds the widest graph's workspace, the dq beside and the accumulator. False when cuDNN
// cannot run a block (nothing written).
bool backward_in_blocks(GqaAttentionContext& ctx, device::CudaDevice& dev, const GqaShape& s,
                        const CudnnAttentionBlocks& shape, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const Tensor& dy, const Tensor& dqkv);

}  // namespace tandem::ops::cuda::cudnn_attention
