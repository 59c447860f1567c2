// The memory model against the allocator, in one process: every rank of every layout of the grid is trained
// for two steps on stand-in communicators (stand_in.h), and its measured peak (AccountedDevice) must match the
// prediction within 5%. Prints the predicted-vs-measured table. Also the structure the model reports: live
// micro-batches within the schedule's bound, the terms that must (not) appear under each ZeRO stage.
#include <gtest/gtest.h>

#include <map>

#include "plan/plan_test_util.h"
#include "plan/stand_in.h"
#include "tandem/plan/preflight.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

using config::Json;
using testing::mem_case;
using testing::MemCase;

uint64_t measure(const MemCase& c, int rank) {
  const Json json = testing::case_config(c);
  const config::TrainConfig cfg = config::parse(config::validate(json), c.dp);
  layout::Groups groups = testing::stand_in_groups(layout::Layout{c.dp, c.pp, c.tp}, rank);
  train::TrainOptions opt;
  opt.print = false;
  train::Trainer trainer = train::Trainer::from_config(cfg, opt, &groups);
  trainer.run();
  return trainer.device().peak_bytes();
}

std::vector<MemCase> grid() {
  std::vector<MemCase> out;
  for (const char* model : {"gpt", "mlp"}) {
    auto add = [&](MemCase c) {
      c.model = model;
      c.steps = 1;  // one process plays every rank in turn: keep each run short
      for (bool ckpt : {false, true}) {
        c.ckpt = ckpt;
        out.push_back(c);
      }
    };
    add(mem_case(1, 1, 1));                   // one device
    add(mem_case(1, 1, 1, 0, "1f1b", 1, 1));  // 8 micro-batches of 1
    for (int zero = 0; zero <= 3; ++zero) add(mem_case(2, 1, 1, zero));
    add(mem_case(4, 1, 1, 3, "1f1b", 1, 1));  // shards padded: the last rank owns fewer elements
    add(mem_case(1, 1, 2));
    for (const char* s : {"gpipe", "1f1b"}) add(mem_case(1, 2, 1, 0, s));
    add(mem_case(1, 2, 1, 0, "interleaved", 2));
    add(mem_case(1, 4, 1, 0, "1f1b", 1, 1));
    add(mem_case(1, 1, 1, 0, "interleaved", 2));  // two chunks on one rank: handed over, not sent
    for (int zero : {1, 3}) add(mem_case(2, 2, 1, zero));
    add(mem_case(2, 2, 1, 2, "interleaved", 2, 1));
    add(mem_case(1, 2, 2, 0, "gpipe"));
    add(mem_case(2, 1, 2, 3));
    // bf16 compute: bf16 values and activations, a separate fp32 master, fp32 scratch in the CPU matmuls.
    for (int zero = 0; zero <= 3; ++zero) add(mem_case(2, 1, 1, zero, "1f1b", 1, 2, true));
    add(mem_case(1, 2, 2, 0, "1f1b", 1, 2, true));
    add(mem_case(1, 2, 1, 0, "interleaved", 2, 2, true));
  }
  return out;
}

TEST(MemoryModel, PredictsEveryRanksMeasuredPeakWithin5Percent) {
  std::vector<testing::MemRow> rows;
  for (const MemCase& c : grid()) {
    const plan::MemoryPrediction p = plan::MemoryModel(testing::model_config(c.model)).predict(testing::case_setup(c));
    testing::MemRow row{c.name()};
    for (int rank = 0; rank < c.dp * c.pp * c.tp; ++rank) {
      const int64_t measured = static_cast<int64_t>(measure(c, rank));
      const int64_t predicted = p.of_rank(rank).peak;
      const double err = std::fabs(static_cast<double>(predicted - measured)) / static_cast<double>(measured);
      EXPECT_LE(err, 0.05) << c.name() << " rank " << rank << ": predicted " << predicted << ", measured " << measured;
      row.worst_error = std::max(row.worst_error, err);
      if (measured > row.measured) {
        row.measured = measured;
        row.predicted = predicted;
      }
    }
    rows.push_back(row);
  }
  std::printf("[memory model, one process, stand-in communicators]\n%s", testing::format_rows(rows).c_str());
}

TEST(MemoryModel, LiveMicroBatchesStayWithinTheScheduleBound) {
  for (const MemCase& c : grid()) {
    const plan::MemoryPrediction p = plan::MemoryModel(testing::model_config(c.model)).predict(testing::case_setup(c));
    for (const plan::RankMemory& r : p.ranks) {
      EXPECT_GE(r.live_micro_batches, 1) << c.name();
      EXPECT_LE(r.live_micro_batches, r.activation_bound) << c.name() << " stage " << r.pp_rank;
    }
  }
}

TEST(MemoryModel, ZeroStagesHoldWhatParameterStoreHolds) {
  // mlp 256-512-...-64 over dp 2: every held term follows ParameterStore's buffers exactly.
  MemCase c = mem_case(2, 1, 1);
  c.model = "mlp";
  std::map<int, plan::RankMemory> by_stage;
  for (int zero = 0; zero <= 3; ++zero) {
    c.zero = zero;
    by_stage[zero] = plan::MemoryModel(testing::model_config("mlp")).predict(testing::case_setup(c)).worst();
  }
  const int64_t P = plan::describe_model(testing::model_config("mlp"), 1).logical_parameters;
  // Every layer's element count is even, so dp 2 pads nothing: stage 0 holds 4 P values + 4 P grads + 8 P moments.
  EXPECT_EQ(by_stage[0].resident[plan::Term::Parameters], 4 * P);
  EXPECT_EQ(by_stage[0].resident[plan::Term::Gradients], 4 * P);
  EXPECT_EQ(by_stage[0].resident[plan::Term::Optimizer], 8 * P);
  EXPECT_EQ(by_stage[1].resident[plan::Term::Gradients], 4 * P + 2 * P);  // full + owned shard
  EXPECT_EQ(by_stage[1].resident[plan::Term::Optimizer], 4 * P);
  EXPECT_EQ(by_stage[2].resident[plan::Term::Gradients], 2 * P);
  EXPECT_EQ(by_stage[3].resident[plan::Term::Parameters], 2 * P);
  EXPECT_EQ(by_stage[0].at_peak[plan::Term::ZeroBuffers], 0);
  EXPECT_GT(by_stage[3].at_peak[plan::Term::ZeroBuffers], 0);  // a gathered layer (and its gradient)
}

TEST(Preflight, SaysThePeakAndWhatFitsWhenOverBudget) {
  MemCase c = mem_case(1, 1, 1);
  c.model = "gpt";
  Json json = testing::case_config(c);
  const config::TrainConfig free_cfg = config::parse(config::validate(json), 1);
  const layout::ParallelPlan plan = layout::resolve_parallel(json.at("parallel"), 1);
  const plan::PreflightResult ok = plan::preflight(free_cfg, plan);
  EXPECT_TRUE(ok.fits);
  EXPECT_NE(ok.line.find("predicted peak per device"), std::string::npos);
  EXPECT_EQ(ok.per_rank.size(), 1u);
  // A budget just under the prediction: over, with the breakdown and a suggestion (checkpointing fits on one
  // device).
  json["device_memory"] = ok.peak - 1024;
  const config::TrainConfig tight = config::parse(config::validate(json), 1);
  const plan::PreflightResult over = plan::preflight(tight, plan);
  EXPECT_FALSE(over.fits);
  EXPECT_NE(over.message.find("activations"), std::string::npos) << over.message;
  EXPECT_NE(over.message.find("fits (predicted peak"), std::string::npos) << over.message;
  std::printf("[preflight over budget] %s\n%s\n", over.line.c_str(), over.message.c_str());
}

// Without "device_memory" the GPU's free memory is the budget; with it, the config's budget wins.
TEST(Preflight, PlansAgainstTheGpuFreeMemoryWhenTheConfigSetsNoBudget) {
  MemCase c = mem_case(1, 1, 1);
  c.model = "gpt";
  Json json = testing::case_config(c);
  const layout::ParallelPlan plan = layout::resolve_parallel(json.at("parallel"), 1);
  const config::TrainConfig no_budget = config::parse(config::validate(json), 1);
  const int64_t peak = plan::preflight(no_budget, plan).peak;
  plan::PreflightOptions gpu;
  gpu.device_free_bytes = static_cast<uint64_t>(peak - 1024);
  const plan::PreflightResult over = plan::preflight(no_budget, plan, gpu);
  EXPECT_FALSE(over.fits);
  EXPECT_NE(over.line.find("free on the GPU"), std::string::npos) << over.line;
  EXPECT_NE(over.message.find("over the GPU's free memory"), std::string::npos) << over.message;
  gpu.device_free_bytes = static_cast<uint64_t>(peak);
  EXPECT_TRUE(plan::preflight(no_budget, plan, gpu).fits);
  json["device_memory"] = 2 * peak;
  gpu.device_free_bytes = 1;
  const plan::PreflightResult configured = plan::preflight(config::parse(config::validate(json), 1), plan, gpu);
  EXPECT_TRUE(configured.fits);
  EXPECT_NE(configured.line.find("(budget "), std::string::npos) << configured.line;
  EXPECT_NE(configured.line.find("predicted step"), std::string::npos) << configured.line;
}

}  // namespace
}  // namespace tandem
