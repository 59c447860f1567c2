// Context parallelism by a ring (parallel.context_attention "ring", nn/ring_attention.h): each shard keeps its tokens
// of every head and the key/value blocks pass around the cp group. A llama of 8 query heads over 2 key/value heads
// trained with ring attention at cp 4, and at cp 2 beside dp 2 at ZeRO-3, tp 2, pp 2 (with recomputation) and LoRA; a
// gpt at cp 2 beside dp 2; a llama of 6 query heads over 2 key/value heads at cp 4, which attention by heads cannot
// split, trained by ring under the default "auto"; attention inside documents (a llama at cp 4, and at cp 2 beside dp
// at ZeRO-3 with recomputation; a gpt beside tp); Qwen3's per-head norms beside tp; attention kept for the
// recomputation: each must match the one-device run within the fp32 bounds of equivalence_bounds.h, as every other
// layout does, and in bf16 within its bf16 bounds. Ring attention's merges and gradient sums run in a fixed order: the
// same bits twice. "heads" for heads that do not split is refused before step 1 by name. Run under mpirun -np 4.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <sstream>

#include "equivalence_bounds.h"
#include "equivalence_run.h"
#include "mpi_test_main.h"
#include "test_subset.h"
#include "test_util.h"

namespace tandem {
namespace {

using config::Json;

struct Case {
  // "llama" (8 query heads over 2 key/value heads), "llama_lora" (LoRA on every projection of a frozen base), "gpt"
  // (multi-head), "llama_6q" (6 query heads over 2: no split by heads at cp 4), "llama_docs" and "gpt_docs" (attention
  // inside documents, id 5 ending each), "llama_qwen3" (Qwen3's per-head q and k norms), "llama_bf16" (compute in
  // bf16, against one device's bf16 run), "llama_keep" (with recomputation, attention's output and lse kept for it)
  std::string model;
  int dp, pp, tp, cp, zero;
  bool checkpointing = false;
  std::string attention = "ring";  // parallel.context_attention
};

std::string case_name(const Case& c) {
  std::ostringstream os;
  os << c.model << "_dp" << c.dp << "_pp" << c.pp << "_tp" << c.tp << "_cp" << c.cp << "_zero" << c.zero
     << (c.checkpointing ? "_recompute" : "") << "_" << c.attention;
  return os.str();
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

Json base_config(const Case& c) {
  Json cfg = {{"train_batch_size", 8},
              {"gradient_accumulation_steps", 2},
              {"steps", 3},
              {"seed", 11},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}, {"weight_decay", 0.1}, {"eps", 1e-6}}}}},
              {"gradient_clipping", 1.0},
              {"eval", {{"data", {{"type", "synthetic"}}}, {"steps", 2}}},
              {"data", {{"type", "synthetic"}}}};
  cfg["model"] = {{"type", "llama"},          {"vocab_size", 64},        {"seq_len", 16},
                  {"hidden_size", 64},        {"intermediate_size", 96}, {"num_hidden_layers", 2},
                  {"num_attention_heads", 8}, {"num_key_value_heads", 2}};
  if (c.model == "llama_6q") {
    cfg["model"]["hidden_size"] = 48;
    cfg["model"]["num_attention_heads"] = 6;
  }
  if (c.model == "llama_lora")
    cfg["lora"] = {{"r", 4}, {"lora_alpha", 8}, {"target_modules", "all-linear"}, {"init_lora_weights", false}};
  if (c.model.rfind("gpt", 0) == 0)
    cfg["model"] = {{"type", "gpt"}, {"vocab_size", 64}, {"seq_len", 16}, {"dim", 32}, {"layers", 2}, {"heads", 4}};
  if (c.model.find("docs") != std::string::npos)
    cfg["data"] = {{"type", "synthetic"}, {"document_mask", true}, {"eos_token_id", 5}};
  if (c.model == "llama_qwen3") cfg["model"]["family"] = "qwen3";
  if (c.model == "llama_bf16") cfg["bf16"] = {{"enabled", true}};
  return cfg;
}

Json layout_config(const Case& c) {
  Json cfg = base_config(c);
  cfg["zero_optimization"] = {{"stage", c.zero}};
  cfg["parallel"] = {{"virtual_gpus", c.dp},
                     {"pipeline", c.pp},
                     {"tensor", c.tp},
                     {"context", c.cp},
                     {"context_attention", c.attention},
                     {"activation_checkpointing", c.checkpointing},
                     {"timeout_s", 120}};
  if (c.model == "llama_keep") cfg["parallel"]["keep_attention"] = true;
  return cfg;
}

layout::Groups groups_of(const Case& c) {
  return layout::make_groups(testing::mpi_world(), layout::Layout{c.dp, c.pp, c.tp, c.cp});
}

// The one-device run of each model, computed once on rank 0.
const Result& reference(const Case& c) {
  static std::map<std::string, Result> cache;
  auto it = cache.find(c.model);
  if (it == cache.end()) it = cache.emplace(c.model, run_training(base_config(c), nullptr)).first;
  return it->second;
}

class ContextRing : public ::testing::TestWithParam<Case> {};

TEST_P(ContextRing, SameLossesAndParametersAsOneDevice) {
  const Case& c = GetParam();
  layout::Groups groups = groups_of(c);
  const Result got = run_training(layout_config(c), &groups);
  // As test_context_parallel.cc's: tp sums the input gradients' partial sums in another order.
  const bool bf16 = c.model == "llama_bf16";
  const Bounds b = bf16                                        ? kBf16
                   : c.tp == 1                                 ? kF32
                   : c.model.find("lora") != std::string::npos ? kF32LoraTp
                                                               : kF32TpLlama;
  int failures = 0;
  if (testing::mpi_world().rank() == 0) {
    const Distance d = compare_to_one_device(got, reference(c), b, b.loss * (bf16 ? 3 : 1));
    failures = d.failures;
    std::printf("[%s] %s against one device: first loss %.1e, any loss %.1e, a tensor %.1e, all %.1e\n",
                bf16 ? "bf16" : "fp32", case_name(c).c_str(), d.first_loss, d.worst_loss, d.worst_tensor, d.all);
  }
  EXPECT_EQ(groups.world->all_reduce_scalar(failures), 0);
}

std::vector<Case> cases() {
  return {{"llama", 1, 1, 1, 4, 0},
          {"llama", 2, 1, 1, 2, 3},
          {"llama", 1, 1, 2, 2, 0},
          {"llama", 1, 2, 1, 2, 0, true},
          {"llama_lora", 2, 1, 1, 2, 1},
          {"gpt", 2, 1, 1, 2, 1},
          {"llama_6q", 1, 1, 1, 4, 0, false, "auto"},
          {"llama_docs", 1, 1, 1, 4, 0},
          {"llama_docs", 2, 1, 1, 2, 3, true},
          {"gpt_docs", 1, 1, 2, 2, 0},
          {"llama_qwen3", 1, 1, 2, 2, 0},
          {"llama_bf16", 2, 1, 1, 2, 1},
          {"llama_keep", 2, 1, 1, 2, 1, true}};
}

// What the AddressSanitizer + UBSan suite runs (tandem_mpi_subset): the ring over 4 shards, and with documents beside
// ZeRO-3's sharded state and recomputation.
std::map<std::string, std::vector<std::string>> subsets() {
  return {{"sanitized", {"llama_6q_dp1_pp1_tp1_cp4_zero0_auto", "llama_docs_dp2_pp1_tp1_cp2_zero3_recompute_ring"}}};
}

INSTANTIATE_TEST_SUITE_P(Layouts, ContextRing,
                         ::testing::ValuesIn(testing::select_subset(cases(), case_name, "ContextRing", subsets())),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// The merges and the gradients' sums around the ring run in one order: the same bits on two runs.
TEST(ContextRingRuns, TheSameBitsTwice) {
  const Case c{"llama_6q", 1, 1, 1, 4, 0, false, "auto"};
  layout::Groups groups = groups_of(c);
  EXPECT_EQ(runs_differ(layout_config(c), groups), 0);
}

// Attention by heads asked for where the heads do not split: refused before step 1, naming ring as the way out.
TEST(ContextRingRuns, HeadsThatDoNotSplitAreRefusedUnderHeads) {
  const Case c{"llama_6q", 1, 1, 1, 4, 0, false, "heads"};
  layout::Groups groups = groups_of(c);
  const std::string msg = testing::error_of([&] { run_training(layout_config(c), &groups); });
  EXPECT_NE(msg.find("parallel.context 4 does not split the 6 query heads over 2 key/value heads"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("parallel.context_attention \"heads\" regroups"), std::string::npos) << msg;
  EXPECT_NE(msg.find("or set parallel.context_attention \"ring\""), std::string::npos) << msg;
}

}  // namespace
}  // namespace tandem
