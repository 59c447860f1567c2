// The rule that picks the CUDA attention path per shape and sizes its scratch (ops/cuda/scratch_sizes.h), which the
// kernels' dispatch and the planner's estimates both follow: cuDNN's deterministic backward whole while its workspace
// is at most kCudnnAttentionWorkspaceLimit, in blocks of query rows past it (each block's dP within
// kCudnnAttentionBlockDpLimit), the flash kernels when not even the smallest block fits or attention is kept
// inside documents. Plain C++: it runs without a GPU (the GPU side is bench/gpu/ops_check's blocks rows).
#include <gtest/gtest.h>

#include "tandem/ops/cuda/scratch_sizes.h"

namespace tandem::ops::cuda {
namespace {

constexpr DType kBf = DType::BF16;
constexpr int64_t kDp = kCudnnAttentionBlockDpLimit;  // the rule's dP bytes a block

TEST(AttentionRule, ShortSequencesRunCudnnWhole) {
  // Llama 3.2 1B at a micro-batch of 4 x 2048: 1.07 GB of dP workspace, within 2 GiB.
  EXPECT_EQ(cudnn_attention_block_rows(4, 32, 8, 2048, 64, kDp), 2048);
  EXPECT_FALSE(attention_uses_flash(kBf, 4, 32, 8, 2048, 64, false, 0));
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 4, 32, 8, 2048, 64, true, 0),
            cudnn_attention_deterministic_workspace(4, 32, 8, 2048, 64, true));
}

TEST(AttentionRule, LongSequencesRunInBlocksOfTheTallestHeightThatFits) {
  // The Llama-3-8B shape at 128k, its heads in the rule's 8 groups (4 query heads over 1 kv head each): 2 x 4 x 4096 x
  // 131072 bytes of dP is 4 GiB, so 32 blocks of 4096 rows, each run over the 8 groups.
  const int64_t t = 131072;
  EXPECT_EQ(cudnn_attention_block_rows(1, 32, 8, t, 128, kDp), 4096);
  EXPECT_EQ(cudnn_attention_blocking(1, 32, 8, t, 128, kDp).groups, 8);
  EXPECT_EQ(cudnn_attention_blocks(4096, t), 32);
  EXPECT_FALSE(attention_uses_flash(kBf, 1, 32, 8, t, 128, false, 0));
  // The scratch: the 4096-row graph's workspace over 4 query heads (its keys all T), the (H, 4096) f32 statistic, the
  // 32 blocks' query and key lengths, each rounded to 256 bytes, then the (T, 2 Hkv D) f32 sums: 5,637,734,912 bytes
  // unsplit, the planner's peak of the 128k step equal to the measured one on an H100 (docs/benchmarks.md); split
  // blocks add their (4096, H D) bf16 dq beside. At 32k: 2 blocks of 16384 rows.
  const bool split = attention_block_split_aimed();
  EXPECT_EQ(cudnn_attention_blocking(1, 32, 8, t, 128, kDp).split, split);
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 1, 32, 8, t, 128, true, 0),
            5637734912 + (split ? 2 * 4096 * 32 * 128 : 0));
  EXPECT_EQ(cudnn_attention_block_rows(1, 32, 8, 32768, 128, kDp), 16384);
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 1, 32, 8, 32768, 128, true, 0),
            4632871424 + (split ? 2 * 16384 * 32 * 128 : 0));
  // The forward runs whole (cuDNN's forward workspace does not grow with T).
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 1, 32, 8, t, 128, false, 0), 256);
}

TEST(AttentionRule, OneBlockOfEveryRowIsTheWholeGraph) {
  // 16 sequences of 2048 at H 32, D 128: 4.8 GB whole, over 2 GiB, but 2 x 16 x 32 x 2048^2 bytes of dP is 4 GiB:
  // one block holds every row, and it is the whole graph with its whole workspace.
  EXPECT_EQ(cudnn_attention_block_rows(16, 32, 8, 2048, 128, kDp), 2048);
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 16, 32, 8, 2048, 128, true, 0),
            cudnn_attention_deterministic_workspace(16, 32, 8, 2048, 128, true));
}

TEST(AttentionRule, TheHeightIsThePowerOfTwoThatFitsWhateverTheLength) {
  for (const int64_t t : {int64_t{131072 + 64}, int64_t{100000}, int64_t{262144 + 1000}}) {
    SCOPED_TRACE(t);
    const CudnnAttentionBlocks blocks = cudnn_attention_blocking(1, 32, 8, t, 128, kDp);
    const int64_t rows = blocks.rows, group_heads = 32 / blocks.groups;
    auto fits = [&](int64_t r) { return 2 * group_heads * r * t <= kCudnnAttentionBlockDpLimit; };
    EXPECT_GE(rows, kCudnnAttentionMinBlockRows);
    EXPECT_EQ(rows & (rows - 1), 0);
    EXPECT_TRUE(fits(rows));
    EXPECT_FALSE(fits(2 * rows));
    EXPECT_EQ(cudnn_attention_blocks(rows, t), (t + rows - 1) / rows);
  }
}

TEST(AttentionRule, TheFlashKernelsTakeWhatNoBlockFitsAndDocuments) {
  // 8M tokens: 64 rows of a head group (4 query heads) against every key are 4 GiB of dP, the most a block may have;
  // 16M are past it.
  const int64_t t8m = int64_t{1} << 23, t16m = int64_t{1} << 24;
  EXPECT_EQ(cudnn_attention_block_rows(1, 32, 8, t8m, 128, kDp), 64);
  EXPECT_EQ(cudnn_attention_block_rows(1, 32, 8, t16m, 128, kDp), 0);
  EXPECT_TRUE(attention_uses_flash(kBf, 1, 32, 8, t16m, 128, false, 0));
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 1, 32, 8, t16m, 128, true, 0), 0);
  EXPECT_TRUE(attention_uses_flash(kBf, 4, 32, 8, 2048, 64, true, 0));
  // Shapes the flash kernels cannot take never go to them: f32, or D 96.
  EXPECT_FALSE(attention_uses_flash(DType::F32, 1, 32, 8, t16m, 128, false, 0));
  EXPECT_FALSE(attention_uses_flash(kBf, 1, 32, 8, t16m, 96, false, 0));
}

TEST(AttentionRule, HeadGroupsAreTheLargestCountAimedAtThatDividesBothHeadCounts) {
  EXPECT_EQ(cudnn_attention_block_groups(32, 8, 4), 4);
  EXPECT_EQ(cudnn_attention_block_groups(32, 8, 16), 8);  // no more groups than kv heads
  EXPECT_EQ(cudnn_attention_block_groups(6, 2, 4), 2);    // 4 and 3 do not divide Hkv 2
  EXPECT_EQ(cudnn_attention_block_groups(12, 12, 8), 6);  // multi-head: 8 and 7 do not divide 12
  EXPECT_EQ(cudnn_attention_block_groups(32, 1, 4), 1);   // multi-query: one group
  EXPECT_EQ(cudnn_attention_block_groups(32, 8, 1), 1);
}

TEST(AttentionRule, HeadGroupsHoldTallerBlocksInTheSameDpBytes) {
  // The Llama-3-8B shape at 128k over 4 head groups: 2 x 8 x 2048 x 131072 bytes of dP is 4 GiB, so 64 blocks of 2048
  // rows, each run 4 times; the scratch is the 2048-row graph's workspace over 8 query heads (its GQA dq sums a
  // quarter of the whole heads'), the whole heads' statistic rows, the lengths and the f32 sums.
  const int64_t t = 131072;
  const CudnnAttentionBlocks four = cudnn_attention_blocking(1, 32, 8, t, 128, kDp, 4);
  EXPECT_EQ(four.rows, 2048);
  EXPECT_EQ(four.groups, 4);
  const CudnnAttentionBlocks one = cudnn_attention_blocking(1, 32, 8, t, 128, kDp, 1);
  EXPECT_EQ(one.rows, 512);
  EXPECT_EQ(one.groups, 1);
  EXPECT_EQ(cudnn_attention_block_workspace(1, 8, 2, 2048, t, 128),
            2 * 8 * 2048 * t + 4 * 8 * 2048 + 256 + 4 * 8 * t * 128);
  // Short sequences run whole with the heads whole, whatever is aimed at; 2M tokens fit 128 rows of 8 heads.
  EXPECT_EQ(cudnn_attention_blocking(4, 32, 8, 2048, 64, kDp, 4).rows, 2048);
  EXPECT_EQ(cudnn_attention_blocking(4, 32, 8, 2048, 64, kDp, 4).groups, 1);
  const CudnnAttentionBlocks long_four = cudnn_attention_blocking(1, 32, 8, int64_t{1} << 21, 128, kDp, 4);
  EXPECT_EQ(long_four.rows, 128);
  EXPECT_EQ(long_four.groups, 4);
  EXPECT_EQ(cudnn_attention_blocking(1, 32, 8, int64_t{1} << 21, 128, kDp, 1).rows, 0);
}

TEST(AttentionRule, SplitBlocksHoldTheirDiagonalsDqBeside) {
  // Blocks split or not as asked; the whole graph and the flash kernels' lengths are never split. A split block's dq
  // beside is (B, rows, H D) 16-bit, rounded to 256 bytes, between the lengths and the sums.
  const int64_t t = 131072, gib = int64_t{1} << 30;
  EXPECT_TRUE(cudnn_attention_blocking(1, 32, 8, t, 128, 4 * gib, 8, true).split);
  EXPECT_FALSE(cudnn_attention_blocking(1, 32, 8, t, 128, 4 * gib, 8, false).split);
  EXPECT_FALSE(cudnn_attention_blocking(4, 32, 8, 2048, 64, 4 * gib, 8, true).split);
  EXPECT_FALSE(cudnn_attention_blocking(1, 32, 8, int64_t{1} << 24, 128, 4 * gib, 8, true).split);
  const int64_t ws = cudnn_attention_block_workspace(1, 4, 1, 4096, t, 128);
  EXPECT_EQ(cudnn_attention_blocked_scratch(ws, 4096, 1, 32, 8, t, 128, true) -
                cudnn_attention_blocked_scratch(ws, 4096, 1, 32, 8, t, 128, false),
            2 * 4096 * 32 * 128);
  EXPECT_EQ(cudnn_attention_blocked_scratch(0, 64, 3, 5, 1, 1000, 24, true) -
                cudnn_attention_blocked_scratch(0, 64, 3, 5, 1, 1000, 24, false),
            (2 * 3 * 64 * 5 * 24 + 255) / 256 * 256);
}

TEST(AttentionRule, TheBlockedScratchIsCarvedInOneOrder) {
  // 128k in 8 groups of 4096 split rows: the workspace, the (H, 4096) f32 statistic, 32 blocks' lengths (256 bytes),
  // the (4096, H D) bf16 dq beside, then the f32 sums; unsplit, the sums follow the lengths.
  const int64_t t = 131072, ws = cudnn_attention_block_workspace(1, 4, 1, 4096, t, 128);
  const CudnnAttentionBlockedScratch l = cudnn_attention_blocked_scratch_layout(ws, 4096, 1, 32, 8, t, 128, true);
  EXPECT_EQ(l.stats, (ws + 255) / 256 * 256);
  EXPECT_EQ(l.lengths, l.stats + 4 * 32 * 4096);
  EXPECT_EQ(l.beside, l.lengths + 256);
  EXPECT_EQ(l.sums, l.beside + 2 * 4096 * 32 * 128);
  EXPECT_EQ(l.bytes, l.sums + 4 * t * 2 * 8 * 128);
  EXPECT_EQ(l.bytes, cudnn_attention_blocked_scratch(ws, 4096, 1, 32, 8, t, 128, true));
  const CudnnAttentionBlockedScratch whole = cudnn_attention_blocked_scratch_layout(ws, 4096, 1, 32, 8, t, 128, false);
  EXPECT_EQ(whole.sums, whole.beside);
  EXPECT_EQ(l.bytes - whole.bytes, 2 * 4096 * 32 * 128);
}

TEST(AttentionRule, MoreDpBytesHoldTallerBlocks) {
  // 8 GiB of dP a block doubles the height at 128k in 8 groups (16 blocks of 8,192 rows) and lets 64 rows of one head
  // at 16M tokens fit (2 x 4 x 64 x 2^24 bytes is 8 GiB), where 4 GiB leaves that length to the flash kernels.
  const int64_t t = 131072, gib = int64_t{1} << 30;
  EXPECT_EQ(cudnn_attention_blocking(1, 32, 8, t, 128, 4 * gib, 8).rows, 4096);
  const CudnnAttentionBlocks taller = cudnn_attention_blocking(1, 32, 8, t, 128, 8 * gib, 8);
  EXPECT_EQ(taller.rows, 8192);
  EXPECT_EQ(taller.groups, 8);
  EXPECT_EQ(cudnn_attention_blocks(taller.rows, t), 16);
  EXPECT_EQ(cudnn_attention_blocking(1, 32, 8, int64_t{1} << 24, 128, 4 * gib, 8).rows, 0);
  EXPECT_EQ(cudnn_attention_blocking(1, 32, 8, int64_t{1} << 24, 128, 8 * gib, 8).rows, 64);
}

TEST(AttentionRule, TheOpsBlockBytesReachThePathAndTheScratch) {
  // The ops' block_bytes (the config's tiles.attention_block_bytes, or the preflight's choice): 0 is the rule's 4 GiB;
  // 8 GiB gives 128k's backward 16 blocks of 8,192 rows, whose scratch the planner counts (the 8,192-row graph's
  // workspace over one group's 4 query heads, the statistic rows, 16 blocks' lengths, the dq beside when split, the
  // sums), and keeps 16M tokens on cuDNN where 4 GiB sends them to the flash kernels.
  const int64_t t = 131072, t16m = int64_t{1} << 24, gib = int64_t{1} << 30;
  EXPECT_EQ(attention_block_bytes(0), kCudnnAttentionBlockDpLimit);
  EXPECT_EQ(attention_block_bytes(8 * gib), 8 * gib);
  const bool split = attention_block_split_aimed();
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 1, 32, 8, t, 128, true, 8 * gib),
            cudnn_attention_blocked_scratch(cudnn_attention_block_workspace(1, 4, 1, 8192, t, 128), 8192, 1, 32, 8, t,
                                            128, split));
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 1, 32, 8, t, 128, true, kDp),
            attention_cudnn_workspace_estimate(kBf, 1, 32, 8, t, 128, true, 0));
  EXPECT_TRUE(attention_uses_flash(kBf, 1, 32, 8, t16m, 128, false, 0));
  EXPECT_FALSE(attention_uses_flash(kBf, 1, 32, 8, t16m, 128, false, 8 * gib));
  // The forward's workspace does not change with the blocks.
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 1, 32, 8, t, 128, false, 8 * gib), 256);
}

}  // namespace
}  // namespace tandem::ops::cuda
