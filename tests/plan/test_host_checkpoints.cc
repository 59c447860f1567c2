// Checkpoints in host memory (parallel.cpu_checkpointing) in the planner: every rank's device peak and host bytes
// predicted to the byte against the allocator (one process, stand-in communicators), the device's peak lower than with
// the inputs on the device, the host holding exactly the inputs that left it, and the preflight's refusal when the
// host is too small for them.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "plan/plan_test_util.h"
#include "tandem/layout/groups.h"
#include "tandem/plan/preflight.h"
#include "tandem/plan/search.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

using config::Json;
using testing::mem_case;
using testing::MemCase;
using testing::run_case;

plan::MemoryPrediction predict(const MemCase& c) {
  return plan::MemoryModel(testing::planned(c.model)).predict(testing::case_setup(c), true);
}

std::vector<MemCase> cases() {
  std::vector<MemCase> out;
  const auto add = [&](const char* model, MemCase c, const std::string& offload = "") {
    c.model = model;
    c.ckpt = true;
    c.cpu_ckpt = true;
    c.offload = offload;
    out.push_back(c);
  };
  for (const char* model : {"gpt", "llama"}) {
    add(model, mem_case(1, 1, 1));                                   // one device, 4 micro-batches of 2
    add(model, mem_case(1, 2, 1, 0, spec::ScheduleKind::OneFOneB));  // 1F1B: stage 0 holds two micro-batches
  }
  add("gpt", mem_case(1, 2, 1, 0, spec::ScheduleKind::Interleaved, 2));        // two chunks a rank
  add("gpt", mem_case(2, 1, 1, 3));                                            // ZeRO-3's gathers around each layer
  add("gpt", mem_case(1, 1, 2));                                               // tp: each slot keeps the whole input
  add("gpt", mem_case(1, 1, 1, 0, spec::ScheduleKind::OneFOneB, 1, 2, true));  // bf16
  add("gpt", mem_case(1, 1, 1), "cpu");  // beside offloaded optimizer state, in the same host memory
  add("llama", mem_case(1, 2, 1, 0, spec::ScheduleKind::OneFOneB));  // the first 2 layers of each stage's alone
  out.back().cpu_ckpt_layers = 2;
  // LoRA on every projection in bf16, two steps of one micro-batch: the fused projections' merged adapters (q, k, v
  // and gate, up) hold nothing in the second step's backward that the first's did not (the peak of either is the
  // plan's, which runs one).
  add("llama_lora", mem_case(1, 1, 1, 0, spec::ScheduleKind::OneFOneB, 1, 2, true));
  out.back().global = 2;
  return out;
}

// One case a test.
class HostCheckpointsCase : public ::testing::TestWithParam<MemCase> {};

TEST_P(HostCheckpointsCase, PredictTheDeviceAndTheHostExactly) {
  const MemCase& c = GetParam();
  const plan::MemoryPrediction p = predict(c);
  MemCase on_device = c;
  on_device.cpu_ckpt = false;
  const plan::MemoryPrediction before = predict(on_device);
  // The fullest device holds less. A rank whose peak comes in the backward of its chunk's first layers holds no more
  // than before (the last stage of a pipeline: by then the inputs are gone from the device either way).
  EXPECT_LT(p.peak(), before.peak()) << c.name() << ": the inputs left the device";
  testing::MemRow row{c.name()};
  for (int rank = 0; rank < c.dp * c.pp * c.tp; ++rank) {
    const plan::RankMemory& r = p.of_rank(rank);
    EXPECT_GT(r.host_checkpoints(), 0) << c.name() << " rank " << rank;
    EXPECT_LE(r.peak, before.of_rank(rank).peak) << c.name() << " rank " << rank;
    run_case(c, rank, [&](train::Trainer& trainer) {
      const auto measured = static_cast<int64_t>(trainer.device().peak_bytes());
      ASSERT_NE(trainer.engine().host_memory(), nullptr) << c.name();
      const device::AccountedDevice& host = *trainer.engine().host_memory();
      EXPECT_EQ(r.peak, measured) << c.name() << " rank " << rank << ": device";
      EXPECT_EQ(r.host_peak, static_cast<int64_t>(host.peak_bytes())) << c.name() << " rank " << rank << ": host";
      // The buffers are kept for the next step: what the host holds after it is what the plan counted.
      EXPECT_EQ(r.host_checkpoints(), host.live()[MemoryPurpose::Activations]) << c.name() << " rank " << rank;
      if (measured > row.measured) {
        row.measured = measured;
        row.predicted = r.peak;
      }
    });
    std::printf(
        "[host checkpoints] %s rank %d: device peak %lld with the inputs on the device, %lld with them in "
        "host memory (%lld in host memory)\n",
        c.name().c_str(), rank, static_cast<long long>(before.of_rank(rank).peak), static_cast<long long>(r.peak),
        static_cast<long long>(r.host_checkpoints()));
  }
  std::printf("[memory model with checkpoints in host memory: the device's peak]\n%s",
              testing::format_rows({row}).c_str());
}

INSTANTIATE_TEST_SUITE_P(Cases, HostCheckpointsCase, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<MemCase>& info) { return info.param.test_name(); });

// On one device, one micro-batch at a time: the host holds every layer's input but the last one's (the head's, whose
// backward comes first). The peak comes in the last block's backward: on the device it held the inputs of every layer
// below too, with them in host memory only the one prefetched beside it.
TEST(HostCheckpoints, TheHostHoldsEveryInputButTheLast) {
  MemCase c = mem_case(1, 1, 1);
  c.model = "gpt";
  c.ckpt = true;
  c.cpu_ckpt = true;
  const plan::MemoryPrediction p = predict(c);
  MemCase on_device = c;
  on_device.cpu_ckpt = false;
  const plan::MemoryPrediction before = predict(on_device);
  // gpt: the embedding takes tokens (B, T) i32, the 4 blocks (B, T, C) fp32; (B, T, C) = (2, 64, 64).
  const int64_t tokens = 2 * 64 * 4, block_input = 2 * 64 * 64 * 4;
  EXPECT_EQ(p.of_rank(0).host_checkpoints(), tokens + 4 * block_input);
  EXPECT_NE(before.worst().when.find("blocks.3 backward"), std::string::npos) << before.worst().when;
  EXPECT_EQ(before.peak() - p.peak(), tokens + 2 * block_input) << "the embedding's and blocks 0 and 1's inputs";
}

// The preflight counts the inputs as host memory and refuses a host too small for them, saying by how much and what
// to change.
TEST(HostCheckpoints, PreflightRefusesAHostTooSmallForThem) {
  MemCase c = mem_case(1, 1, 1);
  c.model = "gpt";
  c.ckpt = true;
  c.cpu_ckpt = true;
  Json json = testing::case_config(c);
  const layout::ParallelPlan plan = layout::resolve_parallel(config::parallel_config(json.at("parallel")), 1);
  EXPECT_TRUE(plan.cpu_checkpointing);
  const plan::PreflightResult ok = plan::preflight(config::parse(config::validate(json), 1), plan);
  EXPECT_TRUE(ok.fits);
  EXPECT_NE(ok.line.find("checkpointed layer inputs"), std::string::npos) << ok.line;
  ASSERT_GT(ok.host_per_node, 2048);
  json["host_memory"] = ok.host_per_node - 2048;
  const config::TrainConfig small = config::parse(config::validate(json), 1);
  plan::PreflightOptions options;
  options.host_memory_bytes = small.host_memory_bytes;  // as the app passes it
  const plan::PreflightResult over = plan::preflight(small, plan, options);
  EXPECT_FALSE(over.fits);
  EXPECT_EQ(over.message.rfind("host memory too small for the checkpoints: ", 0), 0u) << over.message;
  EXPECT_NE(over.message.find("2.0 KiB over"), std::string::npos) << over.message;
  EXPECT_NE(over.message.find("parallel.cpu_checkpointing false"), std::string::npos) << over.message;
  EXPECT_NE(over.message.find("\"host_memory\""), std::string::npos) << over.message;
  std::printf("[preflight, host too small] %s\n%s\n", over.line.c_str(), over.message.c_str());
}

// The search tries checkpoints in host memory where checkpointing on the device does not fit: under a budget between
// the two peaks, the host-checkpointed candidate fits, says so in its name and config keys, and --explain reads it.
TEST(HostCheckpoints, TheSearchTriesThemWhereTheDeviceFallsShort) {
  MemCase c = mem_case(1, 1, 1);
  c.model = "gpt";
  c.ckpt = true;
  c.cpu_ckpt = true;
  const int64_t host_peak = predict(c).peak();
  c.cpu_ckpt = false;
  const int64_t device_peak = predict(c).peak();
  ASSERT_LT(host_peak, device_peak);
  plan::SearchOptions o;
  o.devices = 1;
  o.device_memory = static_cast<uint64_t>(host_peak);
  o.rates = plan::builtin_rates("cpu");
  o.cpu_threads = omp_get_max_threads();  // as the predictions above, so the peaks are the same
  o.global_batch = c.global;
  const plan::SearchResult r = plan::search_layouts(testing::planned("gpt"), o);
  const plan::Candidate* found = nullptr;
  for (const plan::Candidate& k : r.fit)
    if (k.setup.plan.cpu_checkpointing && k.setup.micro_batch == c.micro && !k.setup.offload_optimizer.enabled())
      found = &k;
  ASSERT_NE(found, nullptr) << plan::format_table(r, o, 40);
  EXPECT_EQ(found->memory.peak(), host_peak);
  EXPECT_EQ(found->name(), "dp1,pp1,tp1,zero0,micro2,ckpt,cpu_ckpt");
  EXPECT_EQ(found->config().at("parallel").at("cpu_checkpointing"), true);
  const plan::Setup parsed = plan::parse_candidate(found->name(), o);
  EXPECT_TRUE(parsed.plan.activation_checkpointing && parsed.plan.cpu_checkpointing);
  std::printf("[search under %lld bytes]\n%s", static_cast<long long>(host_peak), plan::format_table(r, o, 6).c_str());
}

}  // namespace
}  // namespace tandem
