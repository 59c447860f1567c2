// Attention kept across activation checkpointing (parallel.keep_attention) in the planner: every rank's device peak
// predicted to the byte against the allocator (one process, stand-in communicators), and higher than recomputing
// attention by at most what the kept outputs weigh.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "plan/plan_test_util.h"
#include "tandem/layout/groups.h"
#include "tandem/plan/search.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

using testing::mem_case;
using testing::MemCase;
using testing::run_case;

plan::MemoryPrediction predict(const MemCase& c) {
  return plan::MemoryModel(testing::planned(c.model)).predict(testing::case_setup(c), true);
}

std::vector<MemCase> cases() {
  std::vector<MemCase> out;
  const auto add = [&](const char* model, MemCase c) {
    c.model = model;
    c.ckpt = true;
    c.keep_attention = true;
    out.push_back(c);
  };
  for (const char* model : {"gpt", "llama", "llama_docs"}) add(model, mem_case(1, 1, 1));
  add("llama", mem_case(1, 2, 1, 0, spec::ScheduleKind::OneFOneB));  // 1F1B: stage 0 keeps two micro-batches'
  add("gpt", mem_case(2, 1, 1, 3));                                  // beside ZeRO-3's gathers
  add("llama", mem_case(1, 1, 2));                                   // tp: each slot keeps its heads' outputs
  MemCase host = mem_case(1, 1, 1, 0, spec::ScheduleKind::OneFOneB, 1, 2, true);  // bf16
  host.cpu_ckpt = true;  // the inputs in host memory, the kept outputs on the device
  add("llama", host);
  return out;
}

// One case a test.
class KeptAttentionCase : public ::testing::TestWithParam<MemCase> {};

TEST_P(KeptAttentionCase, PredictsEveryRanksPeakExactly) {
  const MemCase& c = GetParam();
  const plan::MemoryPrediction p = predict(c);
  MemCase recomputed = c;
  recomputed.keep_attention = false;
  const plan::MemoryPrediction before = predict(recomputed);
  EXPECT_GT(p.peak(), before.peak()) << c.name() << ": the kept outputs are held beside the inputs";
  testing::MemRow row{c.name()};
  for (int rank = 0; rank < c.dp * c.pp * c.tp; ++rank) {
    const plan::RankMemory& r = p.of_rank(rank);
    run_case(c, rank, [&](train::Trainer& trainer) {
      const auto measured = static_cast<int64_t>(trainer.device().peak_bytes());
      EXPECT_EQ(r.peak, measured) << c.name() << " rank " << rank;
      if (measured > row.measured) {
        row.measured = measured;
        row.predicted = r.peak;
      }
    });
  }
  std::printf("[memory model with attention kept for the recomputation]\n%s", testing::format_rows({row}).c_str());
}

INSTANTIATE_TEST_SUITE_P(Cases, KeptAttentionCase, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<MemCase>& info) { return info.param.test_name(); });

// On one device the kept outputs are each block's attention output (B, T, C) and log-sum-exp (B, H, T) f32, held for
// every block at once: the peak grows by at most 4 blocks' worth (less where the recomputation's own attention
// output was part of the peak before).
TEST(KeptAttention, HoldsEachBlocksOutputAndLogSumExp) {
  MemCase c = mem_case(1, 1, 1);
  c.model = "gpt";
  c.ckpt = true;
  const int64_t before = predict(c).peak();
  c.keep_attention = true;
  const int64_t kept = predict(c).peak();
  // gpt: 4 blocks of (B, T, C) = (2, 64, 64) fp32 outputs and (B, H, T) = (2, 4, 64) f32 statistics.
  const int64_t per_block = 2 * 64 * 64 * 4 + 2 * 4 * 64 * 4;
  EXPECT_GT(kept - before, 0);
  EXPECT_LE(kept - before, 4 * per_block);
  std::printf("[kept attention] gpt one device: peak %lld recomputing attention, %lld keeping it (+%lld)\n",
              static_cast<long long>(before), static_cast<long long>(kept), static_cast<long long>(kept - before));
}

}  // namespace
}  // namespace tandem
