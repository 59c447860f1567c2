// The memory model against real multi-process runs: every layout of TANDEM_TEST_WORLD processes in the grid
// trains two steps under mpirun, each rank compares its own measured peak (its AccountedDevice) with the
// prediction the trainer's preflight makes for it: they must be equal. Rank 0 prints the predicted-vs-measured table.
#include <gtest/gtest.h>

#include <tuple>

#include "mpi_test_main.h"
#include "plan/plan_test_util.h"
#include "tandem/layout/groups.h"
#include "tandem/plan/preflight.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

using config::Json;
using testing::mem_case;
using testing::MemCase;

std::vector<MemCase> grid() {
  std::vector<MemCase> out;
  if (TANDEM_TEST_WORLD == 8) {
    // Every axis at once, on every rank: among them an mlp under GPipe with activation checkpointing and ZeRO-2 (its
    // last stage was once predicted 1.1% under its measured peak).
    for (const char* model : {"mlp", "gpt"})
      for (MemCase c : {mem_case(2, 2, 2, 2, spec::ScheduleKind::GPipe, 1, 1),
                        mem_case(2, 2, 2, 2, spec::ScheduleKind::GPipe, 1, 4),
                        mem_case(2, 2, 2, 2, spec::ScheduleKind::GPipe, 1, 1, true),
                        mem_case(2, 2, 2, 2, spec::ScheduleKind::GPipe, 1, 2, true),
                        mem_case(2, 2, 2, 2, spec::ScheduleKind::GPipe), mem_case(2, 2, 2, 0),
                        mem_case(2, 2, 2, 3, spec::ScheduleKind::Interleaved, 2, 1),
                        mem_case(2, 2, 2, 1, spec::ScheduleKind::OneFOneB, 1, 2, true)})
        for (bool ckpt : {false, true}) {
          c.model = model;
          c.ckpt = ckpt;
          out.push_back(c);
        }
    // Context parallelism beside every other axis: sequences split over 2 processes, ZeRO-3 over the 4 replicas.
    MemCase c = mem_case(2, 2, 1, 3);
    c.model = "llama";
    c.cp = 2;
    out.push_back(c);
    return out;
  }
  for (const char* model : {"gpt", "mlp"}) {
    auto add = [&](MemCase c) {
      c.model = model;
      for (bool ckpt : {false, true}) {
        c.ckpt = ckpt;
        out.push_back(c);
      }
    };
    for (int zero = 0; zero <= 3; ++zero) add(mem_case(4, 1, 1, zero, spec::ScheduleKind::OneFOneB, 1, 1));
    for (auto s : {spec::ScheduleKind::GPipe, spec::ScheduleKind::OneFOneB}) add(mem_case(1, 4, 1, 0, s, 1, 1));
    add(mem_case(1, 2, 2, 0, spec::ScheduleKind::Interleaved, 2));
    add(mem_case(1, 1, 4));
    for (int zero : {1, 3}) add(mem_case(2, 2, 1, zero));
    add(mem_case(2, 2, 1, 2, spec::ScheduleKind::Interleaved, 2, 1));
    add(mem_case(2, 1, 2, 3));
    add(mem_case(1, 2, 2));
    for (int zero : {0, 3}) add(mem_case(4, 1, 1, zero, spec::ScheduleKind::OneFOneB, 1, 1, true));
    add(mem_case(2, 2, 1, 1, spec::ScheduleKind::OneFOneB, 1, 2, true));
  }
  // LoRA on a frozen llama: ZeRO-3 over 4 replicas, and tp2 x dp2 ZeRO-2 in bf16.
  for (MemCase c : {mem_case(4, 1, 1, 3, spec::ScheduleKind::OneFOneB, 1, 1),
                    mem_case(2, 1, 2, 2, spec::ScheduleKind::OneFOneB, 1, 2, true)}) {
    c.model = "llama_lora";
    out.push_back(c);
  }
  // Context parallelism: each sequence over 2 processes beside dp (ZeRO-1, and ZeRO-3 with documents) and pp (with
  // activation checkpointing), and a gpt's beside dp: attention's all-to-all buffers and whole-sequence q, k, v among
  // the activations; and with the projections in FP8 under each recipe, their amaxes' maximum over the shards
  // (blockwise: the micro-batch's 128 tokens one tile).
  for (auto [model, dp, pp, zero, ckpt] :
       {std::tuple{"llama", 2, 1, 1, false}, std::tuple{"llama_docs", 2, 1, 3, false},
        std::tuple{"llama", 1, 2, 0, true}, std::tuple{"gpt", 2, 1, 1, false}, std::tuple{"llama_fp8", 2, 1, 3, false},
        std::tuple{"llama_fp8_rowwise", 1, 2, 0, true}, std::tuple{"llama_fp8_blockwise", 2, 1, 1, false}}) {
    MemCase c = mem_case(dp, pp, 1, zero);
    c.model = model;
    c.cp = 2;
    c.ckpt = ckpt;
    out.push_back(c);
  }
  // Each sequence over 4 processes, more than the llama's 2 key/value heads: the repeated heads and the summed copies
  // of their gradients among the buffers.
  MemCase repeated = mem_case(1, 1, 1, 0);
  repeated.model = "llama";
  repeated.cp = 4;
  out.push_back(repeated);
  // Ring attention: each sequence over 4 processes, and over 2 beside dp at ZeRO-3 (with activation checkpointing, and
  // with documents), and a gpt's beside dp: the key/value blocks in flight, the merged outputs and the gradients
  // travelling with the blocks among the buffers.
  for (auto [model, dp, cp, zero, ckpt] :
       {std::tuple{"llama", 1, 4, 0, false}, std::tuple{"llama", 2, 2, 3, true},
        std::tuple{"llama_docs", 2, 2, 3, false}, std::tuple{"gpt", 2, 2, 1, false}}) {
    MemCase c = mem_case(dp, 1, 1, zero);
    c.model = model;
    c.cp = cp;
    c.context_attention = "ring";
    c.ckpt = ckpt;
    out.push_back(c);
  }
  // Expert parallelism over real exchanges: the experts over 2 of 4 replicas at ZeRO-3, every token routed to every
  // expert (so each slot receives the balanced prediction's rows).
  MemCase moe = mem_case(4, 1, 1, 3);
  moe.model = "llama_qwen3_moe_every";
  moe.ep = 2;
  out.push_back(moe);
  // The balance loss under pipelines, its sums sent with each activation and gradient among the pipeline buffers: pp
  // alone (the stages without MoE layers pass them on), interleaved beside the experts over 2 replicas at ZeRO-3, and
  // beside context parallelism with activation checkpointing.
  for (auto [dp, pp, cp, ep, zero, schedule, ckpt] : {std::tuple{1, 4, 1, 1, 0, spec::ScheduleKind::OneFOneB, false},
                                                      std::tuple{2, 2, 1, 2, 3, spec::ScheduleKind::Interleaved, false},
                                                      std::tuple{1, 2, 2, 1, 0, spec::ScheduleKind::GPipe, true}}) {
    MemCase c = mem_case(dp, pp, 1, zero, schedule, schedule == spec::ScheduleKind::Interleaved ? 2 : 1, 1);
    c.model = "llama_qwen3_moe_every";
    c.cp = cp;
    c.ep = ep;
    c.ckpt = ckpt;
    out.push_back(c);
  }
  return out;
}

TEST(MemoryModelMpi, PredictsEveryRanksMeasuredPeakExactly) {
  std::vector<testing::MemRow> rows;
  const int me = testing::mpi_world().rank();
  for (const MemCase& c : grid()) {
    layout::Layout l{c.dp, c.pp, c.tp, c.cp};
    l.ep = c.ep;
    const Json json = testing::case_config(c);
    const config::TrainConfig cfg = config::parse(config::validate(json), c.dp);
    layout::Groups groups = layout::make_groups(testing::mpi_world(), l);
    const layout::ParallelPlan plan = layout::resolve_parallel(config::parallel_config(json.at("parallel")), l.world());
    // What the trainer will call before it allocates (the lead wires it in): every rank's prediction.
    const plan::PreflightResult pre = plan::preflight(cfg, plan);
    train::TrainOptions opt;
    opt.print = false;
    train::Trainer trainer = train::Trainer::from_config(cfg, plan, opt, &groups);
    trainer.run();
    const int64_t measured = static_cast<int64_t>(trainer.device().peak_bytes());
    const int64_t predicted = pre.per_rank.at(static_cast<size_t>(me));
    const double err = std::fabs(static_cast<double>(predicted - measured)) / static_cast<double>(measured);
    EXPECT_EQ(predicted, measured) << c.name() << " rank " << me;
    // Rank 0 gathers each rank's figures, one scalar at a time.
    testing::MemRow row{c.name()};
    for (int r = 0; r < l.world(); ++r) {
      const double m = groups.world->all_reduce_scalar(r == me ? static_cast<double>(measured) : 0.0);
      const double e = groups.world->all_reduce_scalar(r == me ? err : 0.0);
      row.worst_error = std::max(row.worst_error, e);
      if (m > static_cast<double>(row.measured)) {
        row.measured = static_cast<int64_t>(m);
        row.predicted = pre.per_rank.at(static_cast<size_t>(r));
      }
    }
    rows.push_back(row);
  }
  if (me == 0)
    std::printf("[memory model, %d processes under mpirun]\n%s", TANDEM_TEST_WORLD, testing::format_rows(rows).c_str());
}

}  // namespace
}  // namespace tandem
