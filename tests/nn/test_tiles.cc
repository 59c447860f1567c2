// The long-sequence passes in pieces (nn/tiles.h). The head that computes the loss itself (nn/loss.h's head_loss
// through LlamaHead and GptHead, with a loss sink in the batch): in one chunk it gives the bits of the logits path
// (forward, cross_entropy_loss, backward), in several the same loss and gradients to rounding, with masked rows,
// under recomputation, and in evaluation. LlamaBlock's MLP in tiles of rows: the same loss and gradients to rounding,
// with and without activation checkpointing (whose second forward then leaves the MLP out).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model_test_util.h"
#include "tandem/core/ignore_target.h"
#include "tandem/device/cpu_device.h"
#include "tandem/nn/llama.h"
#include "tandem/nn/loss.h"
#include "tandem/nn/models.h"
#include "tandem/nn/tiles.h"

namespace tandem::nn {
namespace {

using testing::random_tokens;
using testing::small_llama;

struct Result {
  double loss_sum = 0;
  std::vector<float> grads;
};

// The logits path: the model returns the logits, the caller computes the loss and starts the backward from them.
Result through_logits(Model& m, const Tensor& x, const Tensor& y) {
  m.zero_grad();
  std::vector<Saved> saved;
  const Tensor logits = m.forward(x, saved);
  Result r;
  r.loss_sum = cross_entropy_sum_and_grad(logits, y, static_cast<double>(y.numel()));
  m.backward(logits, saved);
  r.grads = m.flat_grads().to_host_floats();
  return r;
}

// The head's own loss, `chunk_rows` rows of logits at a time; `training` false is evaluation (no backward).
Result through_sink(Model& m, const Tensor& x, const Tensor& y, int64_t chunk_rows, bool training = true,
                    bool recompute = false, int64_t mlp_rows = 0) {
  m.zero_grad();
  LossSink sink{Tensor::zeros({1}, DType::F32, x.device(), "loss sum"), static_cast<double>(y.numel()), 1.0f};
  Batch batch;
  batch.targets = y;
  batch.loss = &sink;
  batch.training = training;
  batch.tiles.loss_tokens = chunk_rows;
  batch.tiles.mlp_tokens = mlp_rows;
  std::vector<Saved> saved;
  const size_t n = m.layers().size();
  const Tensor out = m.forward_range(0, n, x, saved, recompute, nullptr, batch);
  EXPECT_FALSE(out.defined()) << "a head with a sink returns no logits";
  if (training) m.backward_range(0, n, Tensor(), saved, recompute, nullptr, batch);
  Result r;
  r.loss_sum = sink.sum.to_host_floats()[0];
  r.grads = m.flat_grads().to_host_floats();
  return r;
}

void expect_close(const Result& a, const Result& b, double tol) {
  EXPECT_NEAR(a.loss_sum, b.loss_sum, tol * std::fabs(b.loss_sum));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    num += std::pow(static_cast<double>(a.grads[i]) - b.grads[i], 2);
    den += std::pow(static_cast<double>(b.grads[i]), 2);
  }
  EXPECT_GT(den, 0.0);
  EXPECT_LE(std::sqrt(num / den), tol);
}

class HeadLoss : public ::testing::TestWithParam<const char*> {
 protected:
  Model build() const {
    if (std::string(GetParam()) == "llama") return build_llama(small_llama());
    return build_gpt({13, 6, 16, 2, 4});
  }
};

TEST_P(HeadLoss, OneChunkGivesTheBitsOfTheLogitsPath) {
  device::CpuDevice dev;
  Model m = build();
  ASSERT_TRUE(m.computes_loss());
  m.materialize(dev, 3);
  const Tensor x = random_tokens(dev, {2, 6}, 13, 1);
  Tensor y = random_tokens(dev, {12}, 13, 2);
  y.i32()[4] = kIgnoreTarget;  // a masked row: no loss, no gradient
  const Result plain = through_logits(m, x, y);
  for (int64_t chunk : {int64_t{0}, int64_t{12}, int64_t{100}}) {
    const Result fused = through_sink(m, x, y, chunk);
    EXPECT_EQ(fused.loss_sum, plain.loss_sum) << "chunk rows " << chunk;
    EXPECT_EQ(fused.grads, plain.grads) << "chunk rows " << chunk;
  }
  // Recomputing the layers in the backward (activation checkpointing) changes nothing either.
  const Result recomputed = through_sink(m, x, y, 12, true, true);
  EXPECT_EQ(recomputed.loss_sum, plain.loss_sum);
  EXPECT_EQ(recomputed.grads, plain.grads);
}

TEST_P(HeadLoss, ChunksOfRowsGiveTheSameLossAndGradientsToRounding) {
  device::CpuDevice dev;
  Model m = build();
  m.materialize(dev, 5);
  const Tensor x = random_tokens(dev, {2, 6}, 13, 3);
  Tensor y = random_tokens(dev, {12}, 13, 4);
  y.i32()[0] = kIgnoreTarget;
  y.i32()[11] = kIgnoreTarget;
  const Result plain = through_logits(m, x, y);
  for (int64_t chunk : {1, 5, 7, 11}) {
    SCOPED_TRACE("chunk rows " + std::to_string(chunk));
    const Result fused = through_sink(m, x, y, chunk);
    expect_close(fused, plain, 1e-6);
    // Run to run, the same chunks give the same bits.
    const Result again = through_sink(m, x, y, chunk);
    EXPECT_EQ(again.grads, fused.grads) << "the same chunks give the same bits";
  }
}

TEST_P(HeadLoss, EvaluationComputesTheLossInTheForwardAndTouchesNoGradient) {
  device::CpuDevice dev;
  Model m = build();
  m.materialize(dev, 7);
  const Tensor x = random_tokens(dev, {2, 6}, 13, 5);
  const Tensor y = random_tokens(dev, {12}, 13, 6);
  const Result plain = through_logits(m, x, y);
  const Result whole = through_sink(m, x, y, 0, false);
  EXPECT_EQ(whole.loss_sum, plain.loss_sum);
  for (float g : whole.grads) ASSERT_EQ(g, 0.0f);
  const Result chunked = through_sink(m, x, y, 5, false);
  EXPECT_NEAR(chunked.loss_sum, plain.loss_sum, 1e-6 * std::fabs(plain.loss_sum));
}

INSTANTIATE_TEST_SUITE_P(Heads, HeadLoss, ::testing::Values("llama", "gpt"));

TEST(MlpTiles, TheSameLossAndGradientsToRoundingWithAndWithoutRecomputation) {
  device::CpuDevice dev;
  Model m = build_llama(small_llama());
  m.materialize(dev, 9);
  const Tensor x = random_tokens(dev, {2, 6}, 13, 7);
  Tensor y = random_tokens(dev, {12}, 13, 8);
  y.i32()[3] = kIgnoreTarget;
  const Result whole = through_sink(m, x, y, 0);
  for (int64_t tile : {1, 5, 7}) {
    SCOPED_TRACE("tile rows " + std::to_string(tile));
    const Result tiled = through_sink(m, x, y, 0, true, false, tile);
    expect_close(tiled, whole, 1e-6);
    // Activation checkpointing's second forward leaves the tiled MLP out; the backward recomputes it the same way.
    const Result recomputed = through_sink(m, x, y, 0, true, true, tile);
    EXPECT_EQ(recomputed.loss_sum, tiled.loss_sum);
    EXPECT_EQ(recomputed.grads, tiled.grads);
    // The tiled forward's output itself: the logits of the tiled model equal the whole one's to rounding.
    const Result eval = through_sink(m, x, y, 0, false, false, tile);
    EXPECT_NEAR(eval.loss_sum, whole.loss_sum, 1e-6 * std::fabs(whole.loss_sum));
  }
  // Loss chunks and MLP tiles together.
  expect_close(through_sink(m, x, y, 5, true, true, 5), whole, 1e-6);
}

TEST(LossChunkRows, AtMostTheBudgetOfLogitsAndAtLeastOneRow) {
  // A 128,256-token vocabulary in bf16: 256,512 bytes a row, so 2,092 rows in 512 MiB.
  EXPECT_EQ(loss_chunk_rows(0, 1 << 20, 128256, DType::BF16), 2092);
  EXPECT_EQ(loss_chunk_rows(0, 100, 128256, DType::BF16), 100);  // fewer rows than a chunk: one chunk
  EXPECT_EQ(loss_chunk_rows(0, 10, int64_t{1} << 40, DType::F32), 1);
  EXPECT_EQ(loss_chunk_rows(7, 100, 13, DType::F32), 7);  // tiles.loss_tokens
  EXPECT_EQ(loss_chunk_rows(7, 5, 13, DType::F32), 5);
}

TEST(MlpTileRows, WholeWhenTheIntermediatesFitElseMultiplesOf128InTheBudget) {
  // The Llama-3-8B's F 14,336 in bf16: 114,688 bytes of intermediates a row; 1 GiB holds 9,362 rows, so tiles of
  // 9,344 (73 x 128), and the 2,048 rows of one sequence of 2k run whole.
  EXPECT_EQ(mlp_tile_rows(0, 2048, 14336, DType::BF16), 2048);
  EXPECT_EQ(mlp_tile_rows(0, 9362, 14336, DType::BF16), 9362);
  EXPECT_EQ(mlp_tile_rows(0, 131072, 14336, DType::BF16), 9344);
  EXPECT_EQ(mlp_tile_rows(0, 1 << 20, int64_t{1} << 30, DType::F32), 128);  // never under 128 rows
  EXPECT_EQ(mlp_tile_rows(5, 12, 24, DType::F32), 5);                       // tiles.mlp_tokens
  EXPECT_EQ(mlp_tile_rows(50, 12, 24, DType::F32), 12);
}

}  // namespace
}  // namespace tandem::nn
