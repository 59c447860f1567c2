// Checkpoints in host memory (parallel.cpu_checkpointing) change where the checkpointed layer inputs wait, never what
// is computed: the same losses, gradient norms, held-out loss and final parameters, to the bit, as the same layout with
// the inputs on the device, for a llama on one device and in layouts of two processes (a pipeline under 1F1B and
// interleaved, ZeRO-3's gathers, tp), in fp32 and bf16; and the device's peak is lower. Run under mpirun -np 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "equivalence_run.h"
#include "mpi_test_main.h"
#include "tandem/config/config.h"
#include "tandem/layout/groups.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

using config::Json;

struct Case {
  int dp, pp, tp, zero;
  std::string schedule;  // "1f1b" or "interleaved"
  bool bf16 = false;
};

std::string case_name(const Case& c) {
  std::ostringstream os;
  os << "llama_dp" << c.dp << "_pp" << c.pp << "_tp" << c.tp << "_zero" << c.zero << "_" << c.schedule
     << (c.bf16 ? "_bf16" : "");
  return os.str();
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

// 6 blocks and 4 micro-batches a step, so every stage holds several inputs of several micro-batches.
Json llama_config(bool bf16) {
  Json cfg = {{"train_batch_size", 16},
              {"gradient_accumulation_steps", 4},
              {"steps", 4},
              {"seed", 7},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}, {"weight_decay", 0.1}, {"eps", 1e-6}}}}},
              {"gradient_clipping", 1.0},
              {"model",
               {{"type", "llama"},
                {"vocab_size", 64},
                {"seq_len", 16},
                {"hidden_size", 32},
                {"intermediate_size", 48},
                {"num_hidden_layers", 6},
                {"num_attention_heads", 4},
                {"num_key_value_heads", 2}}},
              {"data", {{"type", "synthetic"}}},
              {"eval", {{"data", {{"type", "synthetic"}}}, {"steps", 2}}}};
  if (bf16) cfg["bf16"] = {{"enabled", true}};
  return cfg;
}

// Activation checkpointing with its inputs on the device, then in host memory: the same bits, and a lower peak.
TEST(HostCheckpoints, SameBitsOnOneDevice) {
  if (testing::mpi_world().rank() != 0) return;
  for (bool bf16 : {false, true}) {
    Json cfg = llama_config(bf16);
    cfg["parallel"] = {{"activation_checkpointing", true}};
    const Result device = run_training(cfg, nullptr);
    cfg["parallel"]["cpu_checkpointing"] = true;
    const Result host = run_training(cfg, nullptr);
    EXPECT_EQ(bit_differences(host, device), 0) << (bf16 ? "bf16" : "fp32");
    EXPECT_LT(host.peak_bytes, device.peak_bytes);
    std::printf("[host checkpoints] one device%s: peak %llu bytes with the inputs on the device, %llu in host memory\n",
                bf16 ? " bf16" : "", static_cast<unsigned long long>(device.peak_bytes),
                static_cast<unsigned long long>(host.peak_bytes));
  }
}

// parallel.cpu_checkpointing_layers 2 of the 7 that can: the same bits again, a peak between the two, and the copies
// of those two layers' inputs alone.
TEST(HostCheckpoints, SomeLayersOnly) {
  if (testing::mpi_world().rank() != 0) return;
  Json cfg = llama_config(false);
  cfg["parallel"] = {{"activation_checkpointing", true}};
  const Result device = run_training(cfg, nullptr);
  cfg["parallel"]["cpu_checkpointing"] = true;
  const Result all = run_training(cfg, nullptr);
  cfg["parallel"]["cpu_checkpointing_layers"] = 2;
  const Result some = run_training(cfg, nullptr);
  EXPECT_EQ(bit_differences(some, device), 0);
  EXPECT_LT(some.peak_bytes, device.peak_bytes);
  EXPECT_GT(some.peak_bytes, all.peak_bytes);
  std::printf(
      "[host checkpoints] peak %llu with the inputs on the device, %llu with 2 layers' in host memory, %llu "
      "with all\n",
      static_cast<unsigned long long>(device.peak_bytes), static_cast<unsigned long long>(some.peak_bytes),
      static_cast<unsigned long long>(all.peak_bytes));
  cfg["parallel"].erase("cpu_checkpointing");
  try {
    run_training(cfg, nullptr);
    ADD_FAILURE() << "cpu_checkpointing_layers without cpu_checkpointing was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("needs \"cpu_checkpointing\": true"), std::string::npos) << e.what();
  }
}

// DeepSpeed's key turns on the same thing.
TEST(HostCheckpoints, DeepSpeedKeySameBits) {
  if (testing::mpi_world().rank() != 0) return;
  Json cfg = llama_config(false);
  cfg["parallel"] = {{"activation_checkpointing", true}, {"cpu_checkpointing", true}};
  const Result tandem_key = run_training(cfg, nullptr);
  cfg["parallel"].erase("cpu_checkpointing");
  cfg["activation_checkpointing"] = {{"cpu_checkpointing", true}};
  const Result deepspeed_key = run_training(cfg, nullptr);
  EXPECT_EQ(bit_differences(deepspeed_key, tandem_key), 0);
  EXPECT_EQ(deepspeed_key.peak_bytes, tandem_key.peak_bytes);
}

// The step's timeline (diagnostics.timeline_step, TANDEM_TIMELINE=S) shows the inputs' copies on offload's tracks, one
// span a kept input and micro-batch: down in the recorded step's backward, up in the step after's forward; with
// cpu_checkpointing_layers, those layers' alone.
TEST(HostCheckpoints, TheTimelineShowsTheCopies) {
  if (testing::mpi_world().rank() != 0) return;
  for (const int layers : {-1, 3}) {
    namespace fs = std::filesystem;
    const fs::path out = fs::temp_directory_path() / ("tandem_host_checkpoints_" + std::to_string(::getpid()));
    fs::remove_all(out);
    Json cfg = llama_config(false);
    cfg["steps"] = 3;
    cfg["parallel"] = {{"activation_checkpointing", true}, {"cpu_checkpointing", true}};
    if (layers >= 0) cfg["parallel"]["cpu_checkpointing_layers"] = layers;
    {
      train::TrainOptions opt;
      opt.print = false;
      opt.out_dir = out.string();
      opt.diagnostics.timeline_step = 2;
      const config::TrainConfig tc = config::parse(config::validate(cfg), 1);
      train::Trainer trainer = train::Trainer::from_config(tc, layout::resolve_parallel(tc.parallel, 1), opt);
      trainer.run();
    }
    std::ifstream in(out / "timeline_rank0.json");
    ASSERT_TRUE(in) << "no timeline in " << out;
    const Json trace = Json::parse(in);
    std::map<std::string, int> copies;  // by track
    for (const Json& e : trace.at("traceEvents"))
      if (e.at("name").get<std::string>().rfind("checkpoint ", 0) == 0) ++copies[e.at("tid").get<std::string>()];
    // 8 layers (the embedding, 6 blocks, the head), all but the head's input in host memory (or the first `layers`), 4
    // micro-batches a step.
    const int held = layers < 0 ? 7 : layers;
    EXPECT_EQ(copies["to device"], held * 4) << layers;
    EXPECT_EQ(copies["to host"], held * 4) << layers;
    fs::remove_all(out);
  }
}

class HostCheckpointLayouts : public ::testing::TestWithParam<Case> {};

TEST_P(HostCheckpointLayouts, SameBitsAsTheInputsOnTheDevice) {
  const Case& c = GetParam();
  Json cfg = llama_config(c.bf16);
  cfg["zero_optimization"] = {{"stage", c.zero}};
  cfg["parallel"] = {{"virtual_gpus", c.dp},
                     {"pipeline", c.pp},
                     {"tensor", c.tp},
                     {"schedule", c.schedule},
                     {"activation_checkpointing", true},
                     {"timeout_s", 120}};
  layout::Groups groups = layout::make_groups(testing::mpi_world(), layout::Layout{c.dp, c.pp, c.tp});
  const Result device = run_training(cfg, &groups);
  cfg["parallel"]["cpu_checkpointing"] = true;
  const Result host = run_training(cfg, &groups);
  double failures = 0;
  if (testing::mpi_world().rank() == 0) failures += bit_differences(host, device);
  // Every rank's own peak is lower: each stage kept its inputs on the device before.
  EXPECT_LT(host.peak_bytes, device.peak_bytes) << "rank " << testing::mpi_world().rank();
  failures += host.peak_bytes >= device.peak_bytes;
  failures = groups.world->all_reduce_scalar(failures);
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, HostCheckpointLayouts,
                         ::testing::Values(Case{1, 2, 1, 0, "1f1b"}, Case{1, 2, 1, 0, "1f1b", true},
                                           Case{1, 2, 1, 0, "interleaved"}, Case{2, 1, 1, 3, "1f1b"},
                                           Case{1, 1, 2, 0, "1f1b"}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

}  // namespace
}  // namespace tandem
