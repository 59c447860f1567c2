// Scratch sizes of the RMSNorm (rmsnorm.cu, head_norm.cu) and grouped-query attention kernels (attention_gqa.cu,
// attention_flash_*.cu), and which attention kernels run, shared by the kernels and by scratch.cc (which every build
// compiles, so the planner can plan GPUs without the CUDA toolkit). Plain C++: no CUDA header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tandem/core/tensor.h"
#include "tandem/ops/cuda/workspace.h"

namespace tandem::ops::cuda {

// rmsnorm_backward's dgamma, general kernels: pass 1 sums slices of this many rows per column into (slices, C) f32
// partials, pass 2 adds the slices in order.
inline constexpr int64_t kRmsnormRowsPerSlice = 64;
inline int64_t rmsnorm_slices(int64_t rows) { return (rows + kRmsnormRowsPerSlice - 1) / kRmsnormRowsPerSlice; }
inline int64_t rmsnorm_backward_general_scratch_bytes(int64_t rows, int64_t cols) {
  return rows == 0 || cols == 0 ? 0 : rmsnorm_slices(rows) * cols * 4;
}
// The one-pass packed kernel (C a whole number of 16-byte packs, at most 1024 a row, tensors aligned) shares
// LayerNorm's row split (workspace.h) and writes (blocks, C) f32 dgamma partials, one row a block.
inline int64_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t cols, int64_t elem_bytes) {
  if (rows == 0 || cols == 0) return 0;
  const int p = layernorm_backward_packs_per_thread(cols, elem_bytes);
  if (p == 0) return rmsnorm_backward_general_scratch_bytes(rows, cols);
  const int64_t per = layernorm_backward_rows_per_block(rows, p);
  return (rows + per - 1) / per * cols * 4;
}

// head_norm_backward's gains (head_norm.cu): pass 1 sums the same slices of rows per column, for the q and the k gain,
// into (slices, 2, D) f32 partials; pass 2 adds the slices in order.
inline int64_t head_norm_backward_scratch_bytes(int64_t rows, int64_t d) {
  return rows == 0 || d == 0 ? 0 : rmsnorm_slices(rows) * 2 * d * 4;
}

// attention_gqa_backward's plain kernels and flash kernels (attention_flash.h): rowsum(dO * O) (B, H, T) f32.
inline int64_t attention_gqa_backward_scratch_bytes(int64_t batch, int64_t heads, int64_t t) {
  return batch * heads * t * 4;
}

// cuDNN's workspace for the fused attention graph of this shape (forward or backward), asked of cuDNN on `device`
// when it is a CUDA device (attention_cudnn.cc: the graph is built and cached there, and the run reuses it); 0 for
// any other device, and where the plain or the flash kernels run (attention_uses_flash below). `block_bytes`: the op's
// (attention_block_bytes).
int64_t attention_gqa_cudnn_workspace_bytes(Device* device, const Tensor& qkv, int heads, int kv_heads, bool backward,
                                            int64_t block_bytes);

// The shapes cuDNN's fused attention takes: 16-bit data, the head dim D and the fused row width (H + 2 Hkv) D in
// multiples of 8 elements (its pointers on 16-byte boundaries besides: attention_cudnn.cc checks those).
inline bool cudnn_attention_shape(DType t, int64_t d, int64_t width) {
  return (t == DType::BF16 || t == DType::F16) && d % 8 == 0 && width % 8 == 0;
}

// The sizes cuDNN 9 gave on an H200 for the deterministic graphs (bench/gpu/ops_check prints them;
// docs/benchmarks.md, 2026-12-01), 256 bytes forward, and backward 2 B H T^2 bytes, a (B, H, T) f32 row statistic and
// 256 bytes, plus a (B, H, T, D) f32 dq accumulator when Hkv < H; exact for the gpt 1.64B, Llama 3.2 1B and 3B
// shapes.
inline int64_t cudnn_attention_deterministic_workspace(int64_t b, int64_t h, int64_t kv, int64_t seq, int64_t d,
                                                       bool backward) {
  if (!backward) return 256;
  return 2 * b * h * seq * seq + 4 * b * h * seq + 256 + (kv < h ? 4 * b * h * seq * d : 0);
}

// The shapes the flash kernels take (attention_flash.h): 16-bit data and D 64 or 128.
inline bool flash_attention_shape(DType t, int64_t d) {
  return (t == DType::BF16 || t == DType::F16) && (d == 64 || d == 128);
}

// Above this, cuDNN's deterministic backward workspace (quadratic in T) is not worth its memory: the flash kernels
// run instead, whose scratch is linear in T. cuDNN, the faster where it fits, keeps the short sequences: at H 32,
// T 2048 up to B 7 and T 4096 at B 1. 2 GiB rather than 1: the Llama 3.2 1B shape at micro batch 4 of 2048 tokens
// wants 1.14 GB (a 1 GiB quadratic term and a 64 MiB dq accumulator), and its measured H200 peak
// (tests/plan/test_memory_model.cc) is cuDNN's.
inline constexpr int64_t kCudnnAttentionWorkspaceLimit = int64_t{2} << 30;

// False when TANDEM_NONDETERMINISTIC_ATTENTION=1 is in the environment (read once, here): cuDNN's backward is then
// its non-deterministic one, whose workspace is linear in T, and it runs wherever it takes the shape. True otherwise:
// every attention path gives the same bits run to run.
inline bool attention_deterministic() {
  static const bool deterministic = [] {
    const char* nd = std::getenv("TANDEM_NONDETERMINISTIC_ATTENTION");
    return !(nd && std::string(nd) == "1");
  }();
  return deterministic;
}

// cuDNN's deterministic backward graph for blocks of `rows` query rows against keys of which there are `keys` at most
// (the block's own cut at run time by cuDNN's padding mask): 2 B H rows keys bytes (the dP tiles), the (B, H, rows)
// f32 statistic, 256 bytes, and an f32 (B, H, keys, D) dq accumulator when Hkv < H. cuDNN 9.19 gave these sizes on
// an H200 for the Llama-3-8B shape at 32k (2048 rows) and 128k (512 rows) (bench/gpu/ops_check prints them;
// docs/long-context.md, 2026-12-04).
inline int64_t cudnn_attention_block_workspace(int64_t b, int64_t h, int64_t kv, int64_t rows, int64_t keys,
                                               int64_t d) {
  return 2 * b * h * rows * keys + 4 * b * h * rows + 256 + (kv < h ? 4 * b * h * keys * d : 0);
}

// Past kCudnnAttentionWorkspaceLimit the deterministic backward runs in blocks of query rows
// (attention_cudnn_blocks.cc): each block's cuDNN graph writes its rows of dq straight into dqkv and the
// (B, keys, 2 Hkv D) dk and dv of its keys into dqkv's k and v columns, which an f32 (B, T, 2 Hkv D) accumulator sums
// block after block in a fixed order (the same bits every run). One graph serves every block of one height: its keys
// are all T, cut to the block's own at run time (cuDNN's padding mask), so a block's dP tiles are sized for rows x T.
// The height is the largest power of two, 64 at least, whose 2 B H rows T bytes of dP (of one head group's H, below)
// fit the run's block bytes (the ops' `block_bytes`, from the config's tiles.attention_block_bytes or the preflight's
// choice; 0: kCudnnAttentionBlockDpLimit); the last block takes what is left.
inline constexpr int64_t kCudnnAttentionBlockDpLimit = int64_t{4} << 30;
inline constexpr int64_t kCudnnAttentionMinBlockRows = 64;
inline int64_t attention_block_bytes(int64_t set) { return set > 0 ? set : kCudnnAttentionBlockDpLimit; }

// Taller blocks where the device has room: with tiles.attention_block_bytes 0, the preflight gives the blocks this
// many bytes of dP when the run's plan with them fits its budget (plan/preflight.cc), else the 4 GiB above. On an
// H100 the 8-layer Llama-3-8B shape's 128k step ran 10,520 tok/s in 8 GiB blocks against 9,436 in 4 (74.40 GiB
// against 70.37), and the full 8B with LoRA at 64k 4,714 against 4,589 (docs/benchmarks.md, 2026-12-05).
inline constexpr int64_t kCudnnAttentionBlockDpRoomy = int64_t{8} << 30;

// A block's graph may take the heads in groups, H / groups query heads over Hkv / groups kv heads, one group after
// another (each its own query and key columns of qkv and dqkv): a group's dP tiles are 2 B (H / groups) rows T bytes,
// so the same kCudnnAttentionBlockDpLimit holds blocks `groups` times taller, and the dk and dv sums run once for
// every `groups` times as many rows. The number of groups aimed at is kCudnnAttentionBlockGroups, or N where
// TANDEM_ATTENTION_BLOCK_GROUPS=N is in the environment (to measure the rule against other counts; the planner reads
// the same), cut to the largest that divides both H and Hkv. 8 (one kv head a group for Llama-3's 8): on an H100 the
// 8-layer Llama-3-8B shape's 128k step ran 7,670 tok/s over 1 group (256 blocks of 512 rows), 9,213 over 4 (64 of
// 2,048) and 9,415 over 8 (32 of 4,096), its peak lower each time (docs/benchmarks.md, 2026-12-05).
inline constexpr int64_t kCudnnAttentionBlockGroups = 8;

// The positive count the environment variable `name` gives, else `otherwise`.
inline int64_t positive_or(const char* name, int64_t otherwise) {
  const char* n = std::getenv(name);
  const int64_t asked = n ? std::atoll(n) : 0;
  return asked > 0 ? asked : otherwise;
}

inline int64_t attention_block_groups_aimed() {
  static const int64_t groups = positive_or("TANDEM_ATTENTION_BLOCK_GROUPS", kCudnnAttentionBlockGroups);
  return groups;
}

inline int64_t cudnn_attention_block_groups(int64_t h, int64_t kv, int64_t aimed = attention_block_groups_aimed()) {
  int64_t groups = std::min(aimed, kv);
  while (groups > 1 && (h % groups != 0 || kv % groups != 0)) --groups;
  return std::max<int64_t>(groups, 1);
}

// A whole-height block's graph with the causal mask at its bottom right computes its whole diagonal square, the
// masked half too: in n blocks the backward does (n + 1) / n of the causal work (on an H100 at 128k in 8 groups: 350
// TFLOP/s over 32 blocks, 401 over 16, 384 over 8, 352 over 4, where 8k runs whole at 453). Split, each such block
// runs as two graphs: its rows against the keys before them (no mask; none for the first block) and its diagonal
// square alone (the causal mask at the top left), whose dq lands in a (B, rows, H D) buffer beside and is added to
// the first's in f32. In the same call the split blocks ran 355, 426, 438 and 450, the 32k backward (2 blocks) 427
// against 305, the 128k step 9,436 tok/s against 9,266 and the 8B with LoRA at 64k 4,589 against 4,391, their peaks
// as predicted (docs/benchmarks.md, 2026-12-05). The constant says which the rule runs; TANDEM_ATTENTION_BLOCK_SPLIT=0
// or 1 in the environment says instead (the planner reads the same).
inline constexpr bool kCudnnAttentionBlockSplit = true;

inline bool attention_block_split_aimed() {
  static const bool split = [] {
    const char* n = std::getenv("TANDEM_ATTENTION_BLOCK_SPLIT");
    return n && *n ? std::string(n) != "0" : kCudnnAttentionBlockSplit;
  }();
  return split;
}

// The deterministic backward's blocks: `rows` query rows each, covering [0, R), [R, 2R), ... (the last what is left),
// every block's graph run over `groups` head groups, the whole-height ones split (above) or not.
struct CudnnAttentionBlocks {
  int64_t rows = 0;
  int64_t groups = 1;
  bool split = false;
};

// The blocks' shape: rows seq (one block, the heads whole: the whole graph runs) when the whole graph's workspace fits
// kCudnnAttentionWorkspaceLimit or one block can hold every row; rows 0 when not even 64 rows of a head group fit
// `dp_limit` (the flash kernels run then).
inline CudnnAttentionBlocks cudnn_attention_blocking(int64_t b, int64_t h, int64_t kv, int64_t seq, int64_t d,
                                                     int64_t dp_limit,
                                                     int64_t aimed_groups = attention_block_groups_aimed(),
                                                     bool split = attention_block_split_aimed()) {
  if (cudnn_attention_deterministic_workspace(b, h, kv, seq, d, true) <= kCudnnAttentionWorkspaceLimit) return {seq, 1};
  const int64_t groups = cudnn_attention_block_groups(h, kv, aimed_groups);
  auto fits = [&](int64_t rows) { return 2 * b * (h / groups) * rows * seq <= dp_limit; };
  if (!fits(kCudnnAttentionMinBlockRows)) return {0, 1};
  int64_t rows = kCudnnAttentionMinBlockRows;
  while (2 * rows <= seq && fits(2 * rows)) rows *= 2;
  return rows >= seq ? CudnnAttentionBlocks{seq, 1} : CudnnAttentionBlocks{rows, groups, split};
}

// The blocks' height alone (seq: whole; 0: the flash kernels).
inline int64_t cudnn_attention_block_rows(int64_t b, int64_t h, int64_t kv, int64_t seq, int64_t d, int64_t dp_limit) {
  return cudnn_attention_blocking(b, h, kv, seq, d, dp_limit).rows;
}

inline int64_t cudnn_attention_blocks(int64_t rows, int64_t seq) { return (seq + rows - 1) / rows; }

// The blocked backward's scratch, one allocation, in this order: the widest block graph's cuDNN workspace
// (`block_workspace`), a block's rows of the forward's statistic packed (B, H, rows) f32 (cuDNN before 9.26 takes no
// strided one), every block's (B) i32 query and key lengths, split blocks' (B, rows, H D) 16-bit dq beside, each
// rounded up to 256 bytes, and then the f32 (B, T, 2 Hkv D) dk, dv accumulator. Byte offsets of each part and the
// whole size (the kernels carve the allocation by it, the planner counts `bytes`).
struct CudnnAttentionBlockedScratch {
  int64_t stats = 0, lengths = 0, beside = 0, sums = 0, bytes = 0;
};

inline CudnnAttentionBlockedScratch cudnn_attention_blocked_scratch_layout(int64_t block_workspace, int64_t rows,
                                                                           int64_t b, int64_t h, int64_t kv,
                                                                           int64_t seq, int64_t d, bool split) {
  auto round = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  CudnnAttentionBlockedScratch l;
  l.stats = round(block_workspace);
  l.lengths = l.stats + round(4 * b * h * rows);
  l.beside = l.lengths + round(2 * 4 * b * cudnn_attention_blocks(rows, seq));
  l.sums = l.beside + (split ? round(2 * b * rows * h * d) : 0);
  l.bytes = l.sums + 4 * b * seq * 2 * kv * d;
  return l;
}

inline int64_t cudnn_attention_blocked_scratch(int64_t block_workspace, int64_t rows, int64_t b, int64_t h, int64_t kv,
                                               int64_t seq, int64_t d, bool split) {
  return cudnn_attention_blocked_scratch_layout(block_workspace, rows, b, h, kv, seq, d, split).bytes;
}

// THE rule choosing between cuDNN's fused attention and the flash kernels, per shape, followed by the kernels'
// dispatch (attention_gqa.cc) and the planner's estimates alike, so the predicted workspace stays exact. The forward
// and the backward of one shape take the same path (the backward reads the forward's lse). The flash kernels run
// where they take the shape and either attention is kept inside documents (cuDNN has no such graph here) or not even
// the smallest block of cuDNN's deterministic backward fits `block_bytes` (attention_block_bytes; unless
// attention_deterministic() is false); cuDNN (or, for shapes it cannot take, the plain kernels) otherwise.
inline bool attention_uses_flash(DType t, int64_t b, int64_t h, int64_t kv, int64_t seq, int64_t d, bool documents,
                                 int64_t block_bytes) {
  // B H at most 65535: the kernels' grids put the (batch element, head) pairs in their second dimension.
  if (!flash_attention_shape(t, d) || b * h > 65535) return false;
  return documents || (attention_deterministic() &&
                       cudnn_attention_block_rows(b, h, kv, seq, d, attention_block_bytes(block_bytes)) == 0);
}

// cuDNN's workspace where cuDNN cannot be asked (planning away from the GPU): the sizes above where cuDNN runs (the
// blocked backward's whole scratch where it runs in blocks), 0
// where the flash kernels run (attention_uses_flash) or the plain kernels would (f32, or D or the row width not a
// multiple of 8).
inline int64_t attention_cudnn_workspace_estimate(DType t, int64_t b, int64_t h, int64_t kv, int64_t seq, int64_t d,
                                                  bool backward, int64_t block_bytes) {
  if (!cudnn_attention_shape(t, d, (h + 2 * kv) * d) || attention_uses_flash(t, b, h, kv, seq, d, false, block_bytes))
    return 0;
  const CudnnAttentionBlocks blocks =
      backward && attention_deterministic()
          ? cudnn_attention_blocking(b, h, kv, seq, d, attention_block_bytes(block_bytes))
          : CudnnAttentionBlocks{seq, 1};
  if (blocks.rows >= seq) return cudnn_attention_deterministic_workspace(b, h, kv, seq, d, backward);  // whole
  // The graphs' keys are all T (the padding mask cuts them): the widest is the tallest block's, of one head group.
  const int64_t g = blocks.groups;
  return cudnn_attention_blocked_scratch(cudnn_attention_block_workspace(b, h / g, kv / g, blocks.rows, seq, d),
                                         blocks.rows, b, h, kv, seq, d, blocks.split);
}

}  // namespace tandem::ops::cuda
