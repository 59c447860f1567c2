// Attention kept across activation checkpointing (parallel.keep_attention) changes which ops the recomputation runs,
// never what is computed: the same losses, gradient norms, held-out loss and final parameters, to the bit, as the same
// run recomputing attention, for a llama and a gpt on one device (fp32, bf16, documents, host checkpoints, LoRA with
// dropout, a mixture of experts) and in layouts of two processes (a pipeline, ZeRO-3, tp, context parallelism); the
// recomputation runs no attention forward, and the key without checkpointing is refused before anything is built.
// Run under mpirun -np 2.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "equivalence_run.h"
#include "mpi_test_main.h"
#include "tandem/config/config.h"
#include "tandem/layout/groups.h"
#include "tandem/ops/profile.h"

namespace tandem {
namespace {

using config::Json;

// 4 blocks, 2 micro-batches a step; "llama" 8 query heads over 4 kv heads; the variants below add to it.
Json model_config(const std::string& model) {
  Json cfg = {{"train_batch_size", 8},
              {"gradient_accumulation_steps", 2},
              {"steps", 3},
              {"seed", 11},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}, {"weight_decay", 0.1}, {"eps", 1e-6}}}}},
              {"gradient_clipping", 1.0},
              {"data", {{"type", "synthetic"}}},
              {"eval", {{"data", {{"type", "synthetic"}}}, {"steps", 1}}},
              {"parallel", {{"activation_checkpointing", true}, {"timeout_s", 120}}}};
  if (model == "gpt") {
    cfg["model"] = {{"type", "gpt"}, {"vocab_size", 64}, {"seq_len", 16}, {"dim", 32}, {"layers", 4}, {"heads", 4}};
    return cfg;
  }
  cfg["model"] = {{"type", "llama"},          {"vocab_size", 64},        {"seq_len", 16},
                  {"hidden_size", 32},        {"intermediate_size", 48}, {"num_hidden_layers", 4},
                  {"num_attention_heads", 8}, {"num_key_value_heads", 4}};
  if (model == "llama_bf16") cfg["bf16"] = {{"enabled", true}};
  if (model == "llama_docs") cfg["data"] = {{"type", "synthetic"}, {"document_mask", true}, {"eos_token_id", 5}};
  if (model == "llama_host") cfg["parallel"]["cpu_checkpointing"] = true;
  if (model == "llama_lora")
    cfg["lora"] = {{"r", 4}, {"lora_alpha", 8}, {"lora_dropout", 0.1}, {"target_modules", "all-linear"}};
  if (model == "llama_moe") {
    cfg["model"]["family"] = "qwen3_moe";
    cfg["model"]["head_dim"] = 4;
    cfg["model"]["num_experts"] = 4;
    cfg["model"]["num_experts_per_tok"] = 2;
    cfg["model"]["moe_intermediate_size"] = 16;
    cfg["model"]["output_router_logits"] = true;
    cfg["model"]["router_aux_loss_coef"] = 0.05;
  }
  return cfg;
}

// Trains cfg recomputing attention, then keeping it: the same bits, and the kept outputs add to the peak.
void expect_same_bits(Json cfg, layout::Groups* groups, const std::string& what) {
  const Result recomputed = run_training(cfg, groups);
  cfg["parallel"]["keep_attention"] = true;
  const Result kept = run_training(cfg, groups);
  const bool root = !groups || groups->world->rank() == 0;
  double failures = root ? bit_differences(kept, recomputed) : 0;
  EXPECT_GT(kept.peak_bytes, recomputed.peak_bytes) << what << ": the kept outputs are held beside the inputs";
  failures += kept.peak_bytes <= recomputed.peak_bytes;
  if (groups) failures = groups->world->all_reduce_scalar(failures);
  EXPECT_EQ(failures, 0) << what;
}

TEST(KeptAttention, SameBitsOnOneDevice) {
  if (testing::mpi_world().rank() != 0) return;
  for (const char* model : {"llama", "gpt", "llama_bf16", "llama_docs", "llama_host", "llama_lora", "llama_moe"})
    expect_same_bits(model_config(model), nullptr, model);
}

// The op profile counts each op's calls a step: the recomputation runs attention's forward again only without the key.
TEST(KeptAttention, TheRecomputationRunsNoAttention) {
  if (testing::mpi_world().rank() != 0) return;
  for (const char* model : {"llama", "gpt"}) {
    const std::string forward = "attention_gqa_forward";  // a gpt's multi-head attention too (Hkv = H)
    for (bool keep : {false, true}) {
      Json cfg = model_config(model);
      cfg.erase("eval");
      cfg["parallel"]["keep_attention"] = keep;
      ops::profile::reset();
      ops::profile::set_enabled(true);
      run_training(cfg, nullptr);
      ops::profile::set_enabled(false);
      double calls = 0;
      for (const ops::profile::Row& r : ops::profile::summary().ops)
        if (r.op == forward && r.detail.empty()) calls = r.calls;
      ops::profile::reset();
      // 4 blocks, 2 micro-batches a step: once each in the forward, and again in the recomputation without the key.
      EXPECT_EQ(calls, keep ? 8 : 16) << model << (keep ? " keeping attention" : " recomputing it");
    }
  }
}

TEST(KeptAttention, NeedsActivationCheckpointing) {
  if (testing::mpi_world().rank() != 0) return;
  Json cfg = model_config("llama");
  cfg["parallel"] = {{"keep_attention", true}};
  try {
    run_training(cfg, nullptr);
    ADD_FAILURE() << "keep_attention without activation checkpointing was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.keep_attention"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("activation_checkpointing"), std::string::npos) << e.what();
  }
}

struct Case {
  std::string model;
  int dp, pp, tp, cp, zero;
};
std::string case_name(const Case& c) {
  std::ostringstream os;
  os << c.model << "_dp" << c.dp << "_pp" << c.pp << "_tp" << c.tp << "_cp" << c.cp << "_zero" << c.zero;
  return os.str();
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

class KeptAttentionLayouts : public ::testing::TestWithParam<Case> {};

TEST_P(KeptAttentionLayouts, SameBitsAsRecomputingIt) {
  const Case& c = GetParam();
  Json cfg = model_config(c.model);
  cfg["zero_optimization"] = {{"stage", c.zero}};
  cfg["parallel"]["virtual_gpus"] = c.dp;
  cfg["parallel"]["pipeline"] = c.pp;
  cfg["parallel"]["tensor"] = c.tp;
  if (c.cp > 1) cfg["parallel"]["context"] = c.cp;
  layout::Layout l{c.dp, c.pp, c.tp, c.cp};
  layout::Groups groups = layout::make_groups(testing::mpi_world(), l);
  expect_same_bits(cfg, &groups, case_name(c));
}

INSTANTIATE_TEST_SUITE_P(Layouts, KeptAttentionLayouts,
                         ::testing::Values(Case{"llama", 1, 2, 1, 1, 0}, Case{"llama", 2, 1, 1, 1, 3},
                                           Case{"llama", 1, 1, 2, 1, 0}, Case{"llama", 1, 1, 1, 2, 0},
                                           Case{"gpt", 1, 1, 1, 2, 0}, Case{"llama_docs", 1, 1, 1, 2, 1}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

}  // namespace
}  // namespace tandem
