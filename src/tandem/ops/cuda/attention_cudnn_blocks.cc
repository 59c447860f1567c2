// cuDNN's deterministic attention backward in blocks of query rows (scratch_sizes.h's rule; the graphs in
// attention_cudnn_graphs.h, the sums' kernels in attention_blocks.h).
#include "tandem/ops/cuda/attention_blocks.h"

#if TANDEM_HAVE_CUDNN_FRONTEND
#include <algorithm>

#include "tandem/ops/cuda/attention_cudnn_graphs.h"

namespace tandem::ops::cuda::cudnn_attention {

BlockGraphs block_graphs(GqaAttentionContext& ctx, const GqaShape& s, DType t, const CudnnAttentionBlocks& b) {
  BlockGraphs g;
  GqaShape block = s;
  block.rows = b.rows;
  block.groups = b.groups;
  int64_t widest = 0;
  auto use = [&](const CachedGraph* c) {
    if (!c->graph) return false;
    widest = std::max(widest, c->workspace);
    return true;
  };
  if (b.split) {
    block.part = kBefore;
    g.before = &graph_for(ctx, true, block, t);
    block.part = kDiagonal;
    g.diagonal = &graph_for(ctx, true, block, t);
    g.split = g.before->graph && g.diagonal->graph;
    block.part = kWholeBlock;
  }
  if (g.split) {
    use(g.before);
    use(g.diagonal);
  } else {
    g.full = &graph_for(ctx, true, block, t);
    if (!use(g.full)) return g;
  }
  const int64_t tail = s.t - (cudnn_attention_blocks(b.rows, s.t) - 1) * b.rows;
  if (tail < b.rows) {
    block.rows = tail;
    g.last = &graph_for(ctx, true, block, t);
    if (!use(g.last)) return g;
  } else {
    g.last = g.full;
  }
  g.widest = widest;
  return g;
}

bool backward_in_blocks(GqaAttentionContext& ctx, device::CudaDevice& dev, const GqaShape& s,
                        const CudnnAttentionBlocks& shape, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const Tensor& dy, const Tensor& dqkv) {
  const BlockGraphs graphs = block_graphs(ctx, s, qkv.dtype(), shape);
  if (graphs.widest < 0) return false;
  const int64_t rows = shape.rows, blocks = cudnn_attention_blocks(rows, s.t);
  const int64_t gh = s.h / shape.groups, gkv = s.kv / shape.groups;  // one graph's heads
  const CudnnAttentionBlockedScratch at =
      cudnn_attention_blocked_scratch_layout(graphs.widest, rows, s.b, s.h, s.kv, s.t, s.d, graphs.split);
  Tensor scratch = Tensor::empty({at.bytes / 4}, DType::F32, dev,
                                 "cuDNN attention backward blocks: workspace, statistic rows, lengths, dq, dk dv sums");
  char* ws = static_cast<char*>(scratch.raw());
  char* stats = ws + at.stats;
  auto* lengths = reinterpret_cast<int32_t*>(ws + at.lengths);
  char* beside = ws + at.beside;
  TANDEM_CUDA_CHECK(attention_blocks_lengths(lengths, s.b, s.t, rows, graphs.split, dev.compute_stream()));
  const BlockSums sums{reinterpret_cast<float*>(ws + at.sums),
                       offset(dqkv, k_offset(s)),
                       s.b,
                       s.t,
                       2 * s.kv * s.d,
                       s.width(),
                       qkv.dtype() == DType::F16};
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t a = i * rows, n = std::min(rows, s.t - a);
    const bool final_block = i + 1 == blocks, parts = graphs.split && n == rows;
    for (int64_t g = 0; g < shape.groups; ++g) {
      // The block's rows of the group's lse (B, H, T) packed as (B, gh, n).
      for (int64_t e = 0; e < s.b; ++e)
        TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(stats + 4 * e * gh * n, n * 4,
                                            static_cast<char*>(lse.raw()) + 4 * ((e * s.h + g * gh) * s.t + a), s.t * 4,
                                            n * 4, gh, cudaMemcpyDeviceToDevice, dev.compute_stream()));
      const int64_t q = g * gh * s.d, k = g * gkv * s.d;  // the group's first q and k (or v) column
      // Runs one graph of the block: its dq at `dq`, its keys (and their dk, dv) from row `from`.
      auto execute = [&](const CachedGraph* graph, void* dq, int64_t from) {
        const int64_t kv_at = from * s.width() + k;
        std::unordered_map<int64_t, void*> pack{{kQ, offset(qkv, a * s.width() + q)},
                                                {kK, offset(qkv, kv_at + k_offset(s))},
                                                {kV, offset(qkv, kv_at + v_offset(s))},
                                                {kO, offset(y, a * s.h * s.d + q)},
                                                {kDO, offset(dy, a * s.h * s.d + q)},
                                                {kStats, stats},
                                                {kDQ, dq},
                                                {kDK, offset(dqkv, kv_at + k_offset(s))},
                                                {kDV, offset(dqkv, kv_at + v_offset(s))}};
        if (graph != graphs.diagonal)  // the padding mask's lengths (the diagonal square has none)
          pack.insert({{kSeqQ, lengths + 2 * s.b * i}, {kSeqKv, lengths + 2 * s.b * i + s.b}});
        const fe::error_t status = graph->graph->execute(ctx.handle, pack, ws);
        TANDEM_CHECK(status.is_good(), "cuDNN grouped-query attention backward (a block) failed: ", status.err_msg);
      };
      void* dq = offset(dqkv, a * s.width() + q);
      if (!parts) {
        execute(final_block ? graphs.last : graphs.full, dq, 0);
      } else {
        if (a > 0) execute(graphs.before, dq, 0);  // the keys before the block; the first block has none
        execute(graphs.diagonal, beside + dtype_size(qkv.dtype()) * q, a);
      }
    }
    if (parts)
      TANDEM_CUDA_CHECK(attention_blocks_add_dq(dqkv.raw(), beside, s.b, s.t, s.width(), s.h * s.d, a, rows, sums.f16,
                                                dev.compute_stream()));
    TANDEM_CUDA_CHECK(final_block ? attention_blocks_finish(sums, a, dev.compute_stream())
                                  : attention_blocks_add(sums, a + n, a, dev.compute_stream()));
  }
  return true;
}

}  // namespace tandem::ops::cuda::cudnn_attention
#endif  // TANDEM_HAVE_CUDNN_FRONTEND

namespace tandem::ops::cuda {

#if TANDEM_HAVE_CUDNN_FRONTEND
using namespace cudnn_attention;

bool attention_gqa_backward_in_blocks(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                                      const Tensor& dy, const Tensor& dqkv, int64_t rows, int64_t groups, bool split) {
  const GqaShape s = shape_of(qkv, heads, kv_heads);
  if (rows <= 0 || groups <= 0 || s.h % groups != 0 || s.kv % groups != 0 ||
      !cudnn_can_take(qkv.dtype(), {qkv.raw(), y.raw(), dy.raw(), dqkv.raw()}, s))
    return false;
  device::CudaDevice& dev = cuda_device(dqkv);
  GqaAttentionContext& ctx = dev.context<GqaAttentionContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  return backward_in_blocks(ctx, dev, s, CudnnAttentionBlocks{rows, groups, split}, qkv, y, lse, dy, dqkv);
}
#else
bool attention_gqa_backward_in_blocks(const Tensor&, int, int, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, int64_t, int64_t, bool) {
  return false;
}
#endif

}  // namespace tandem::ops::cuda
