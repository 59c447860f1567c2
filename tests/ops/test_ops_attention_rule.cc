// The rule that picks the CUDA attention path per shape and sizes its scratch (ops/cuda/scratch_sizes.h), which the
// kernels' dispatch and the planner's estimates both follow: cuDNN's deterministic backward whole while its workspace
// is at most kCudnnAttentionWorkspaceLimit, in blocks of query rows past it (each block's dP within
// kCudnnAttentionBlockDpLimit), the flash kernels when not even the smallest block fits or attention is kept
// inside documents. Plain C++: it runs without a GPU (the GPU side is bench/gpu/ops_check's blocks rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tandem/ops/cuda/scratch_sizes.h"

namespace tandem::ops::cuda {
namespace {

constexpr DType kBf = DType::BF16;

TEST(AttentionRule, ShortSequencesRunCudnnWhole) {
  // Llama 3.2 1B at a micro-batch of 4 x 2048: 1.07 GB of dP workspace, within 2 GiB.
  const std::vector<AttentionBlock> blocks = cudnn_attention_backward_blocks(4, 32, 8, 2048, 64);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].first, 0);
  EXPECT_EQ(blocks[0].rows, 2048);
  EXPECT_FALSE(attention_uses_flash(kBf, 4, 32, 8, 2048, 64, false));
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 4, 32, 8, 2048, 64, true),
            cudnn_attention_deterministic_workspace(4, 32, 8, 2048, 64, true));
}

// Every row once, in order; every block but the last of one height, a power of two, 64 at least, as tall as fits.
void expect_tiling(int64_t b, int64_t h, int64_t seq, const std::vector<AttentionBlock>& blocks) {
  auto fits = [&](int64_t rows) { return 2 * b * h * rows * seq <= kCudnnAttentionBlockDpLimit; };
  ASSERT_FALSE(blocks.empty());
  const int64_t rows = blocks.front().rows;
  EXPECT_GE(rows, kCudnnAttentionMinBlockRows);
  EXPECT_EQ(rows & (rows - 1), 0);
  EXPECT_TRUE(fits(rows));
  EXPECT_TRUE(2 * rows > seq || !fits(2 * rows));
  int64_t next = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_EQ(blocks[i].first, next);
    EXPECT_EQ(blocks[i].rows, i + 1 < blocks.size() ? rows : seq - next) << "block " << i;
    next += blocks[i].rows;
  }
  EXPECT_EQ(next, seq);
}

TEST(AttentionRule, LongSequencesRunInBlocksOfTheTallestHeightThatFits) {
  // The Llama-3-8B shape at 128k: 2 x 32 x 512 x 131072 bytes of dP is 4 GiB, so 256 blocks of 512 rows.
  const int64_t t = 131072;
  const std::vector<AttentionBlock> blocks = cudnn_attention_backward_blocks(1, 32, 8, t, 128);
  expect_tiling(1, 32, t, blocks);
  EXPECT_EQ(blocks.size(), 256u);
  EXPECT_EQ(blocks.front().rows, 512);
  EXPECT_FALSE(attention_uses_flash(kBf, 1, 32, 8, t, 128, false));
  // The scratch: the 512-row graph's workspace (its keys all T), the (H, 512) f32 statistic, the 256 blocks' query and
  // key lengths, each rounded to 256 bytes, then the (T, 2 Hkv D) f32 sums.
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 1, 32, 8, t, 128, true),
            (cudnn_attention_block_workspace(1, 32, 8, 512, t, 128) + 255) / 256 * 256 + 4 * 32 * 512 + 2 * 4 * 256 +
                4 * t * 2 * 8 * 128);
  // The forward runs whole (cuDNN's forward workspace does not grow with T).
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 1, 32, 8, t, 128, false), 256);
}

TEST(AttentionRule, OneBlockOfEveryRowIsTheWholeGraph) {
  // 16 sequences of 2048 at H 32, D 128: 4.8 GB whole, over 2 GiB, but 2 x 16 x 32 x 2048^2 bytes of dP is 4 GiB:
  // one block holds every row, and it is the whole graph with its whole workspace.
  const std::vector<AttentionBlock> blocks = cudnn_attention_backward_blocks(16, 32, 8, 2048, 128);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].rows, 2048);
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 16, 32, 8, 2048, 128, true),
            cudnn_attention_deterministic_workspace(16, 32, 8, 2048, 128, true));
}

TEST(AttentionRule, LengthsThatAreNoPowerOfTwoEndInAShortBlock) {
  for (const int64_t t : {int64_t{131072 + 64}, int64_t{100000}, int64_t{262144 + 1000}}) {
    const std::vector<AttentionBlock> blocks = cudnn_attention_backward_blocks(1, 32, 8, t, 128);
    SCOPED_TRACE(t);
    expect_tiling(1, 32, t, blocks);
  }
}

TEST(AttentionRule, TheFlashKernelsTakeWhatNoBlockFitsAndDocuments) {
  // 1M tokens: 64 rows against every key are 4 GiB of dP, the most a block may have; 2M are past it.
  EXPECT_FALSE(cudnn_attention_backward_blocks(1, 32, 8, int64_t{1} << 20, 128).empty());
  EXPECT_TRUE(cudnn_attention_backward_blocks(1, 32, 8, int64_t{1} << 21, 128).empty());
  EXPECT_TRUE(attention_uses_flash(kBf, 1, 32, 8, int64_t{1} << 21, 128, false));
  EXPECT_EQ(attention_cudnn_workspace_estimate(kBf, 1, 32, 8, int64_t{1} << 21, 128, true), 0);
  EXPECT_TRUE(attention_uses_flash(kBf, 4, 32, 8, 2048, 64, true));
  // Shapes the flash kernels cannot take never go to them: f32, or D 96.
  EXPECT_FALSE(attention_uses_flash(DType::F32, 1, 32, 8, int64_t{1} << 21, 128, false));
  EXPECT_FALSE(attention_uses_flash(kBf, 1, 32, 8, int64_t{1} << 21, 96, false));
}

}  // namespace
}  // namespace tandem::ops::cuda
