// A mixture of experts' balance metrics: the per-layer max over mean load from known counts (parallel::moe_metrics), a
// training run of a model whose router sends every token to every expert (every layer exactly balanced), and the
// per-layer list in metrics.jsonl and TensorBoard's scalars.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/device/cpu_device.h"
#include "tandem/layout/groups.h"
#include "tandem/parallel/moe_metrics.h"
#include "tandem/train/metrics_file.h"
#include "tandem/train/step_report.h"
#include "tandem/train/trainer.h"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;
using config::Json;

fs::path fresh_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tandem_test_moe_metrics_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

// One micro-batch's sums of 2 MoE layers over 4 experts, from the tables (L, E) given on the host.
std::shared_ptr<const nn::MoeBalance> balance_of(Device& dev, const std::vector<float>& counts,
                                                 const std::vector<float>& probsum, int64_t rows) {
  auto b = std::make_shared<nn::MoeBalance>();
  b->rows = rows;
  b->layer_counts = Tensor::empty({2, 4}, DType::F32, dev, "layer counts");    // (L, E)
  b->layer_probsum = Tensor::empty({2, 4}, DType::F32, dev, "layer probsum");  // (L, E)
  b->layer_counts.copy_from_host(counts.data());
  b->layer_probsum.copy_from_host(probsum.data());
  return b;
}

// Layer 0's router sends most tokens to expert 0, layer 1's spreads them evenly: the sum over the layers (what
// moe_max_load reports) is milder than layer 0's own figure, which the per-layer list shows.
TEST(MoeMetrics, EachLayersMaxOverMeanFromKnownCounts) {
  device::CpuDevice dev;
  layout::Groups groups = layout::make_single_process_groups();
  // Two micro-batches of 4 tokens a layer, top-1: R = 4 tokens x 2 layers.
  const std::vector<std::shared_ptr<const nn::MoeBalance>> balances = {
      balance_of(dev, {4, 0, 0, 0, 1, 1, 1, 1}, {2, 1, 0.5, 0.5, 1, 1, 1, 1}, 8),
      balance_of(dev, {2, 2, 0, 0, 1, 1, 1, 1}, {1.5, 1.5, 0.5, 0.5, 1, 1, 1, 1}, 8)};
  const parallel::MoeMetrics m = parallel::moe_metrics(balances, groups, dev);
  // Layer 0: (6, 2, 0, 0), max 6 over the mean 2; layer 1: (2, 2, 2, 2), 1. Summed: (8, 4, 2, 2), 8 over 4.
  EXPECT_EQ(m.layer_max_load, std::vector<double>({3.0, 1.0}));
  EXPECT_EQ(m.max_load, 2.0);
  // Each micro-batch's aux = E sum_e C_e P_e / R^2 over both layers' sums, then their mean:
  // (5 3 + 1 2 + 1 1.5 + 1 1.5) 4 / 64 = 1.25 and (3 2.5 + 3 2.5 + 1 1.5 + 1 1.5) 4 / 64 = 1.125.
  EXPECT_DOUBLE_EQ(m.balance_loss, (1.25 + 1.125) / 2);
}

// A Qwen3-MoE whose router chooses all 4 of its 4 experts for every token: every expert of every MoE layer (the
// blocks 1 and 3, decoder_sparse_step 2) gets every token, so each layer's max over mean is exactly 1, and so is the
// sum's; metrics.jsonl holds the list, TensorBoard a scalar per layer named by its block.
TEST(MoeMetrics, ARouterChoosingEveryExpertBalancesEveryLayer) {
  const Json cfg = {{"train_batch_size", 4},
                    {"train_micro_batch_size_per_gpu", 2},
                    {"steps", 2},
                    {"seed", 3},
                    {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                    {"model",
                     {{"type", "llama"},
                      {"family", "qwen3_moe"},
                      {"vocab_size", 64},
                      {"seq_len", 8},
                      {"hidden_size", 16},
                      {"intermediate_size", 24},
                      {"num_hidden_layers", 4},
                      {"head_dim", 8},
                      {"num_attention_heads", 2},
                      {"num_key_value_heads", 1},
                      {"num_experts", 4},
                      {"num_experts_per_tok", 4},
                      {"moe_intermediate_size", 8},
                      {"norm_topk_prob", true},
                      {"decoder_sparse_step", 2}}},
                    {"data", {{"type", "synthetic"}}}};
  const fs::path out = fresh_dir("every_expert");
  TrainOptions opt;
  opt.out_dir = out.string();
  opt.print = false;
  const config::TrainConfig tc = config::parse(config::validate(cfg), 1);
  Trainer t = Trainer::from_config(tc, layout::resolve_parallel(tc.parallel, 1), opt);
  const std::vector<StepMetrics> steps = t.run();
  ASSERT_EQ(steps.size(), 2u);
  for (const StepMetrics& m : steps) {
    EXPECT_TRUE(m.moe);
    EXPECT_EQ(m.moe_layer_max_load, std::vector<double>({1.0, 1.0}));
    EXPECT_EQ(m.moe_layers, std::vector<int>({1, 3}));
    EXPECT_EQ(m.moe_max_load, 1.0);
  }
  std::ifstream f(out / "metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(f, line)) {
    EXPECT_EQ(Json::parse(line).at("moe_layer_max_load"), Json::array({1.0, 1.0})) << line;
    ++lines;
  }
  EXPECT_EQ(lines, 2);
  fs::remove_all(out);
}

TEST(MoeMetrics, TheListGoesToMetricsJsonlAndAScalarPerLayerToTensorBoard) {
  const fs::path out = fresh_dir("file");
  StepMetrics m;
  m.step = 1;
  m.moe = true;
  m.moe_balance_loss = 1.5;
  m.moe_max_load = 1.25;
  m.moe_layer_max_load = {1.5, 1.0};
  m.moe_layers = {0, 2};
  {
    MetricsFile file(out.string(), 0, 0);
    file.write(m);
  }
  std::ifstream f(out / "metrics.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  const Json j = Json::parse(line);
  EXPECT_EQ(j.at("moe_layer_max_load"), Json::array({1.5, 1.0}));
  EXPECT_EQ(j.at("moe_max_load"), 1.25);
  EXPECT_EQ(j.at("moe_balance_loss"), 1.5);
  std::vector<std::string> tags;
  for (const MonitorEvent& e : monitor_events(m, false, true))
    if (e.tag.rfind("Train/Samples/moe_max_load/", 0) == 0) tags.push_back(e.tag + "=" + std::to_string(e.value));
  EXPECT_EQ(tags, std::vector<std::string>(
                      {"Train/Samples/moe_max_load/layer_0=1.500000", "Train/Samples/moe_max_load/layer_2=1.000000"}));
  fs::remove_all(out);
}

}  // namespace
}  // namespace tandem::train
