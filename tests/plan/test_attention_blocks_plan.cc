// The preflight's choice of the GPU attention backward's block bytes (tiles.attention_block_bytes 0): 8 GiB of dP a
// block where the run's plan with them fits its budget, else the rule's 4 GiB; never on the CPU, without a budget or
// where the config sets the bytes. Planned on the counting device for a CUDA run (cuDNN's sizes estimated as away
// from the GPU), on a small llama at a length whose backward runs in blocks.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tandem/config/config.h"
#include "tandem/plan/preflight.h"

namespace tandem {
namespace {

using config::Json;

constexpr int64_t kGiB = int64_t{1} << 30;

// 2 layers of 64, 4 query heads over 2 kv heads (D 16: cuDNN takes it, the flash kernels do not), bf16, one sequence
// of 64k tokens a step with activation checkpointing: 2 B H T^2 bytes of dP whole, so the backward runs in blocks of
// its 2 head groups: 4 of 16,384 rows in 4 GiB, 2 of 32,768 in 8.
Json long_llama() {
  const int64_t t = 65536;
  return {{"model",
           {{"type", "llama"},
            {"vocab_size", 256},
            {"seq_len", t},
            {"max_position_embeddings", t},
            {"hidden_size", 64},
            {"intermediate_size", 96},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2}}},
          {"data", {{"type", "synthetic"}}},
          {"train_batch_size", 1},
          {"bf16", {{"enabled", true}}},
          {"parallel", {{"activation_checkpointing", true}}}};
}

plan::PreflightResult preflight(Json json, uint64_t free_bytes, plan::Backend backend = plan::Backend::Cuda) {
  const config::TrainConfig tc = config::parse(config::validate(json), 1);
  plan::PreflightOptions o;
  o.backend = backend;
  o.cpu_threads = 1;
  o.device_free_bytes = free_bytes;
  o.suggest = false;
  return plan::preflight(tc, layout::resolve_parallel(tc.parallel, 1), o);
}

Json with_blocks(Json json, int64_t bytes) {
  json["tiles"] = {{"attention_block_bytes", bytes}};
  return json;
}

TEST(PreflightAttentionBlocks, TallerWhereThePlanHasRoom) {
  const plan::PreflightResult four = preflight(with_blocks(long_llama(), 4 * kGiB), 0);
  const plan::PreflightResult eight = preflight(with_blocks(long_llama(), 8 * kGiB), 0);
  EXPECT_EQ(four.tiles.attention_block_bytes, 4 * kGiB);  // the config's, kept
  // The taller blocks' dP: 2 x 2 heads x 32,768 rows x 65,536 keys bytes against 16,384 rows; the rest of the peak is
  // the same.
  EXPECT_GT(eight.peak - four.peak, 3 * kGiB);
  EXPECT_LE(eight.peak - four.peak, 5 * kGiB);
  // Unset, with room for them: 8 GiB, the plan being the 8 GiB config's to the byte, and the line says so.
  const plan::PreflightResult roomy = preflight(long_llama(), static_cast<uint64_t>(eight.peak));
  std::printf("%s\n", roomy.line.c_str());
  EXPECT_TRUE(roomy.fits);
  EXPECT_EQ(roomy.tiles.attention_block_bytes, 8 * kGiB);
  EXPECT_EQ(roomy.peak, eight.peak);
  EXPECT_NE(roomy.line.find("attention blocks: 8.0 GiB"), std::string::npos) << roomy.line;
  EXPECT_NE(roomy.line.find("4.0 GiB would peak at"), std::string::npos) << roomy.line;
  // A byte less: the rule's 4 GiB, which fits.
  const plan::PreflightResult tight = preflight(long_llama(), static_cast<uint64_t>(eight.peak - 1));
  EXPECT_TRUE(tight.fits);
  EXPECT_EQ(tight.tiles.attention_block_bytes, 0);
  EXPECT_EQ(tight.peak, four.peak);
  EXPECT_EQ(tight.line.find("attention blocks"), std::string::npos) << tight.line;
}

TEST(PreflightAttentionBlocks, NotChosenWithoutABudgetOnTheCpuOrWhereTheConfigSetsThem) {
  const plan::PreflightResult four = preflight(with_blocks(long_llama(), 4 * kGiB), 0);
  const plan::PreflightResult no_budget = preflight(long_llama(), 0);
  EXPECT_EQ(no_budget.tiles.attention_block_bytes, 0);
  EXPECT_EQ(no_budget.peak, four.peak);
  const uint64_t lots = uint64_t{1} << 40;
  EXPECT_EQ(preflight(long_llama(), lots, plan::Backend::Cpu).tiles.attention_block_bytes, 0);
  const plan::PreflightResult set = preflight(with_blocks(long_llama(), 4 * kGiB), lots);
  EXPECT_EQ(set.tiles.attention_block_bytes, 4 * kGiB);
  EXPECT_EQ(set.peak, four.peak);
  // Short sequences run attention whole: the blocks change no peak, and the line says nothing of them.
  Json short_seq = long_llama();
  short_seq["model"]["seq_len"] = 2048;
  const plan::PreflightResult whole = preflight(short_seq, lots);
  EXPECT_EQ(whole.line.find("attention blocks"), std::string::npos) << whole.line;
  EXPECT_EQ(whole.peak, preflight(with_blocks(short_seq, 4 * kGiB), lots).peak);
}

}  // namespace
}  // namespace tandem
