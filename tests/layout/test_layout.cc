// Tests of layout.h in one process: the rank map (the formula, the round trip for every rank of every layout
// up to 12 devices, the 8-device table of docs/architecture.md), resolve_parallel (what it derives from the
// world size, its defaults, each refusal word for word), validate_for_model's refusals, describe_rank_map's
// text and the single-process Groups. Groups over MPI are in test_groups.cc.
#include <gtest/gtest.h>

#include <array>
#include <set>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/layout/groups.h"
#include "tandem/layout/layout.h"
#include "test_util.h"

namespace tandem::layout {
namespace {

using config::Json;
using tandem::testing::error_of;

// Every (dp, pp, tp) whose product is at most `max_world`.
std::vector<Layout> layouts_up_to(int max_world) {
  std::vector<Layout> out;
  for (int dp = 1; dp <= max_world; ++dp)
    for (int pp = 1; dp * pp <= max_world; ++pp)
      for (int tp = 1; dp * pp * tp <= max_world; ++tp) out.push_back(Layout{dp, pp, tp});
  return out;
}

// ---- Layout and the rank map ----

TEST(Layout, SizesAndName) {
  const Layout l{2, 3, 4};
  EXPECT_EQ(l.world(), 24);
  EXPECT_EQ(l.vgpu_size(), 12);
  EXPECT_EQ(l.str(), "dp 2 x pp 3 x tp 4");
  EXPECT_EQ(Layout{}.str(), "dp 1 x pp 1 x tp 1");
  EXPECT_EQ(Layout{}.world(), 1);
}

// docs/architecture.md: 8 devices as dp 2 x pp 2 x tp 2.
TEST(RankMap, EightDevicesAsDocumented) {
  const Layout l{2, 2, 2};
  const std::array<int, 8> vgpu = {0, 0, 0, 0, 1, 1, 1, 1};
  const std::array<int, 8> stage = {0, 0, 1, 1, 0, 0, 1, 1};
  const std::array<int, 8> slot = {0, 1, 0, 1, 0, 1, 0, 1};
  for (int r = 0; r < 8; ++r) {
    const Coord c = coord_of(l, r);
    EXPECT_EQ(c.dp, vgpu[r]) << "rank " << r;
    EXPECT_EQ(c.pp, stage[r]) << "rank " << r;
    EXPECT_EQ(c.tp, slot[r]) << "rank " << r;
    EXPECT_EQ(rank_of(l, Coord{vgpu[r], stage[r], slot[r]}), r);
  }
}

// rank = tp_rank + tp * (pp_rank + pp * dp_rank): coordinates in range, the formula, the round trip, and
// every coordinate reached once, for every layout of up to 12 devices.
TEST(RankMap, RoundTripForEveryRankOfEveryLayout) {
  const std::vector<Layout> all = layouts_up_to(12);
  ASSERT_EQ(all.size(), 74u);  // the ordered factorisations into three of each n <= 12
  for (const Layout& l : all) {
    std::set<std::array<int, 3>> seen;
    for (int r = 0; r < l.world(); ++r) {
      const Coord c = coord_of(l, r);
      ASSERT_TRUE(c.dp >= 0 && c.dp < l.dp && c.pp >= 0 && c.pp < l.pp && c.tp >= 0 && c.tp < l.tp)
          << l.str() << " rank " << r << " -> (" << c.dp << ", " << c.pp << ", " << c.tp << ")";
      EXPECT_EQ(c.tp + l.tp * (c.pp + l.pp * c.dp), r) << l.str();
      EXPECT_EQ(rank_of(l, c), r) << l.str();
      seen.insert({c.dp, c.pp, c.tp});
    }
    EXPECT_EQ(static_cast<int>(seen.size()), l.world()) << l.str();
  }
}

// The devices of one virtual GPU are neighbours, tensor-parallel peers nearest of all.
TEST(RankMap, VirtualGpusAndTensorSlotsAreContiguous) {
  const Layout l{3, 2, 4};
  for (int r = 0; r < l.world(); ++r) {
    EXPECT_EQ(coord_of(l, r).dp, r / 8) << "rank " << r;
    EXPECT_EQ(rank_of(l, Coord{coord_of(l, r).dp, coord_of(l, r).pp, 0}), r - r % 4) << "rank " << r;
  }
  EXPECT_EQ(rank_of(l, Coord{2, 1, 3}), 23);
  EXPECT_EQ(rank_of(l, Coord{1, 0, 2}), 10);
}

TEST(RankMap, RankOutsideTheLayoutIsRefused) {
  EXPECT_HAS(error_of([] { coord_of(Layout{2, 2, 2}, 8); }), "rank 8 outside dp 2 x pp 2 x tp 2");
  EXPECT_HAS(error_of([] { coord_of(Layout{2, 2, 2}, -1); }), "rank -1 outside dp 2 x pp 2 x tp 2");
}

TEST(RankMap, DescribeRankMapText) {
  EXPECT_EQ(describe_rank_map(Layout{2, 2, 2}, "cpu:"),
            "  rank 0 -> vgpu 0, stage 0, tp slot 0, device cpu:0\n"
            "  rank 1 -> vgpu 0, stage 0, tp slot 1, device cpu:1\n"
            "  rank 2 -> vgpu 0, stage 1, tp slot 0, device cpu:2\n"
            "  rank 3 -> vgpu 0, stage 1, tp slot 1, device cpu:3\n"
            "  rank 4 -> vgpu 1, stage 0, tp slot 0, device cpu:4\n"
            "  rank 5 -> vgpu 1, stage 0, tp slot 1, device cpu:5\n"
            "  rank 6 -> vgpu 1, stage 1, tp slot 0, device cpu:6\n"
            "  rank 7 -> vgpu 1, stage 1, tp slot 1, device cpu:7\n");
  EXPECT_EQ(describe_rank_map(Layout{}, "cuda:"), "  rank 0 -> vgpu 0, stage 0, tp slot 0, device cuda:0\n");
  EXPECT_EQ(describe_rank_map(Layout{1, 3, 1}, "cuda:"),
            "  rank 0 -> vgpu 0, stage 0, tp slot 0, device cuda:0\n"
            "  rank 1 -> vgpu 0, stage 1, tp slot 0, device cuda:1\n"
            "  rank 2 -> vgpu 0, stage 2, tp slot 0, device cuda:2\n");
}

TEST(Groups, SingleProcessGroupsAreThisRankAlone) {
  const Groups g = make_single_process_groups();
  EXPECT_EQ(g.layout.world(), 1);
  EXPECT_EQ(g.rank, 0);
  for (comm::Communicator* c : {g.world.get(), g.dp.get(), g.pp.get(), g.tp.get()}) {
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->size(), 1) << c->name();
    EXPECT_EQ(c->rank(), 0) << c->name();
    EXPECT_EQ(c->world_ranks(), std::vector<int>{0}) << c->name();
    EXPECT_EQ(c->all_reduce_scalar(2.5), 2.5) << c->name();
  }
  EXPECT_EQ(g.world->name(), "world");
  EXPECT_EQ(g.dp->name(), "dp");
  EXPECT_EQ(g.pp->name(), "pp");
  EXPECT_EQ(g.tp->name(), "tp");
}

// ---- resolve_parallel: derivations and defaults ----

Layout layout_for(const std::string& parallel, int world) {
  return resolve_parallel(config::parallel_config(Json::parse(parallel)), world).layout;
}

void expect_layout(const Layout& got, int dp, int pp, int tp) {
  EXPECT_EQ(got.dp, dp) << got.str();
  EXPECT_EQ(got.pp, pp) << got.str();
  EXPECT_EQ(got.tp, tp) << got.str();
}

TEST(ResolveParallel, DefaultsWithoutAParallelObject) {
  const ParallelPlan p = resolve_parallel(config::parallel_config(Json()), 1);
  expect_layout(p.layout, 1, 1, 1);
  EXPECT_EQ(p.schedule, spec::ScheduleKind::OneFOneB);
  EXPECT_EQ(p.virtual_stages, 1);
  EXPECT_FALSE(p.activation_checkpointing);
  EXPECT_TRUE(p.stages.empty());
  EXPECT_EQ(p.timeout_s, 300);
}

// Nothing said: every process is a virtual GPU of one device.
TEST(ResolveParallel, NothingGivenIsDataParallelOverTheWorld) {
  expect_layout(resolve_parallel(config::parallel_config(Json()), 6).layout, 6, 1, 1);
  expect_layout(layout_for("{}", 4), 4, 1, 1);
  expect_layout(layout_for(R"({"schedule": "gpipe"})", 8), 8, 1, 1);
}

// A virtual GPU is a pipeline unless told otherwise.
TEST(ResolveParallel, OnlyVirtualGpusGivenMakesEachOneAPipeline) {
  expect_layout(layout_for(R"({"virtual_gpus": 2})", 8), 2, 4, 1);
  expect_layout(layout_for(R"({"virtual_gpus": 4})", 8), 4, 2, 1);
  expect_layout(layout_for(R"({"virtual_gpus": 8})", 8), 8, 1, 1);
  expect_layout(layout_for(R"({"virtual_gpus": 1})", 3), 1, 3, 1);
}

TEST(ResolveParallel, TheMissingAxisIsDerived) {
  // dp left out: the virtual GPU as given, as many as the world holds.
  expect_layout(layout_for(R"({"pipeline": 2})", 8), 4, 2, 1);
  expect_layout(layout_for(R"({"tensor": 4})", 8), 2, 1, 4);
  expect_layout(layout_for(R"({"pipeline": 2, "tensor": 2})", 8), 2, 2, 2);
  expect_layout(layout_for(R"({"pipeline": 3, "tensor": 2})", 12), 2, 3, 2);
  // dp given with one of pp, tp: the other fills the world.
  expect_layout(layout_for(R"({"virtual_gpus": 2, "pipeline": 2})", 8), 2, 2, 2);
  expect_layout(layout_for(R"({"virtual_gpus": 2, "pipeline": 1})", 8), 2, 1, 4);
  expect_layout(layout_for(R"({"virtual_gpus": 2, "tensor": 2})", 8), 2, 2, 2);
  expect_layout(layout_for(R"({"virtual_gpus": 1, "tensor": 4})", 8), 1, 2, 4);
  // All three given.
  expect_layout(layout_for(R"({"virtual_gpus": 2, "pipeline": 3, "tensor": 2})", 12), 2, 3, 2);
  expect_layout(layout_for(R"({"virtual_gpus": 1, "pipeline": 1, "tensor": 1})", 1), 1, 1, 1);
  // null is no value: the key's row refuses it, as validate() does.
  EXPECT_EQ(error_of([] { layout_for(R"({"tensor": null})", 4); }),
            "config key 'parallel.tensor' must be a positive integer, got null");
}

TEST(ResolveParallel, ScheduleVirtualStagesCheckpointingStagesAndTimeout) {
  ParallelPlan p =
      resolve_parallel(config::parallel_config(Json::parse(R"({"pipeline": 2, "schedule": "interleaved"})")), 2);
  EXPECT_EQ(p.schedule, spec::ScheduleKind::Interleaved);
  EXPECT_EQ(p.virtual_stages, 2);  // interleaving's default
  p = resolve_parallel(
      config::parallel_config(Json::parse(R"({"pipeline": 2, "schedule": "interleaved", "virtual_stages": 3})")), 2);
  EXPECT_EQ(p.virtual_stages, 3);
  p = resolve_parallel(
      config::parallel_config(Json::parse(R"({"pipeline": 2, "schedule": "gpipe", "virtual_stages": 1})")), 2);
  EXPECT_EQ(p.schedule, spec::ScheduleKind::GPipe);
  EXPECT_EQ(p.virtual_stages, 1);
  p = resolve_parallel(config::parallel_config(Json::parse(R"({"activation_checkpointing": true, "timeout_s": 45.5})")),
                       1);
  EXPECT_TRUE(p.activation_checkpointing);
  EXPECT_EQ(p.timeout_s, 45.5);
  EXPECT_EQ(p.schedule, spec::ScheduleKind::OneFOneB);
  p = resolve_parallel(config::parallel_config(Json::parse(R"({"pipeline": 2, "stages": [[0, 1], [2, 5]]})")), 2);
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 1}, {2, 5}};
  EXPECT_EQ(p.stages, want);
}

// ---- resolve_parallel: refusals, word for word ----

std::string resolve_error(const std::string& parallel, int world) {
  return error_of([&] { resolve_parallel(config::parallel_config(Json::parse(parallel)), world); });
}

TEST(ResolveParallel, LayoutOfAnotherSizeSaysWhichNToRunWith) {
  EXPECT_EQ(resolve_error(R"({"virtual_gpus": 2, "pipeline": 2})", 3),
            "the layout dp 2 x pp 2 x tp 1 needs 4 devices but the job has 3 processes: run with -n 4 or change "
            "parallel.virtual_gpus, parallel.pipeline or parallel.tensor");
  EXPECT_EQ(resolve_error(R"({"virtual_gpus": 2, "pipeline": 2, "tensor": 2})", 4),
            "the layout dp 2 x pp 2 x tp 2 needs 8 devices but the job has 4 processes: run with -n 8 or change "
            "parallel.virtual_gpus, parallel.pipeline or parallel.tensor");
  EXPECT_EQ(resolve_error(R"({"virtual_gpus": 3})", 4),
            "the layout dp 3 x pp 1 x tp 1 needs 3 devices but the job has 4 processes: run with -n 3 or change "
            "parallel.virtual_gpus, parallel.pipeline or parallel.tensor");
  EXPECT_EQ(resolve_error(R"({"virtual_gpus": 2, "tensor": 3})", 8),
            "the layout dp 2 x pp 1 x tp 3 needs 6 devices but the job has 8 processes: run with -n 6 or change "
            "parallel.virtual_gpus, parallel.pipeline or parallel.tensor");
}

// Host memory holds what checkpointing keeps: asked for without checkpointing, it is refused before step 1.
TEST(ResolveParallel, CpuCheckpointingNeedsActivationCheckpointing) {
  EXPECT_EQ(resolve_error(R"({"cpu_checkpointing": true})", 1),
            "parallel.cpu_checkpointing keeps the checkpointed layer inputs in host memory, so it needs activation "
            "checkpointing: set \"parallel\": {\"activation_checkpointing\": true}, or remove cpu_checkpointing");
  const ParallelPlan p = resolve_parallel(
      config::parallel_config(Json::parse(R"({"activation_checkpointing": true, "cpu_checkpointing": true})")), 1);
  EXPECT_TRUE(p.cpu_checkpointing);
  EXPECT_FALSE(resolve_parallel(config::parallel_config(Json::parse("{}")), 1).cpu_checkpointing);
}

TEST(ResolveParallel, VirtualGpuThatDoesNotDivideTheWorldIsRefused) {
  EXPECT_EQ(resolve_error(R"({"pipeline": 3})", 4),
            "a virtual GPU of pipeline 3 x tensor 1 = 3 devices does not divide the 4 processes of this job: run "
            "with -n 3 (or a multiple of it) or change parallel.pipeline / parallel.tensor");
  EXPECT_EQ(resolve_error(R"({"pipeline": 2, "tensor": 2})", 1),
            "a virtual GPU of pipeline 2 x tensor 2 = 4 devices does not divide the 1 process of this job: run "
            "with -n 4 (or a multiple of it) or change parallel.pipeline / parallel.tensor");
}

TEST(ResolveParallel, BadValuesAreRefused) {
  EXPECT_EQ(resolve_error(R"({"pipeline": 0})", 1), "config key 'parallel.pipeline' must be a positive integer, got 0");
  EXPECT_EQ(resolve_error(R"({"tensor": -2})", 1), "config key 'parallel.tensor' must be a positive integer, got -2");
  EXPECT_EQ(resolve_error(R"({"virtual_gpus": 1.5})", 1),
            "config key 'parallel.virtual_gpus' must be a positive integer, got 1.5");
  EXPECT_EQ(resolve_error(R"({"virtual_gpus": "2"})", 2),
            "config key 'parallel.virtual_gpus' must be a positive integer, got \"2\"");
  EXPECT_EQ(resolve_error(R"({"pipeline": 2, "schedule": "zero-bubble"})", 2),
            "config key 'parallel.schedule' must be one of \"gpipe\", \"1f1b\", \"interleaved\", got \"zero-bubble\"");
  EXPECT_EQ(resolve_error(R"({"pipeline": 2, "virtual_stages": 2})", 2),
            "parallel.virtual_stages 2 needs \"schedule\": \"interleaved\"");
  EXPECT_EQ(resolve_error(R"({"pipeline": 2, "schedule": "interleaved", "virtual_stages": 0})", 2),
            "config key 'parallel.virtual_stages' must be a positive integer, got 0");
  EXPECT_EQ(resolve_error(R"({"pipeline": 2, "stages": [[0, 1, 2], [3, 5]]})", 2),
            "config key 'parallel.stages' must be an array of [first, last] layer pairs with 0 <= first <= last, e.g. "
            "[[0, 3], [4, 7]], got [[0,1,2],[3,5]]");
  EXPECT_EQ(resolve_error(R"({"pipeline": 2, "stages": [4, 5]})", 2),
            "config key 'parallel.stages' must be an array of [first, last] layer pairs with 0 <= first <= last, e.g. "
            "[[0, 3], [4, 7]], got [4,5]");
}

TEST(ResolveParallel, AutoNeedsThePlanner) {
  EXPECT_EQ(error_of([] { resolve_parallel(config::parallel_config(Json("auto")), 2); }),
            "\"parallel\": \"auto\" needs the planner; give the layout explicitly, e.g. {\"virtual_gpus\": 2, "
            "\"pipeline\": 2}");
}

// ---- validate_for_model ----

spec::ModelConfig gpt(int layers, int heads, int vocab) { return spec::GptConfig{vocab, 16, 32, layers, heads}; }

spec::ModelConfig mlp(std::vector<int64_t> sizes) { return spec::MlpConfig{std::move(sizes)}; }

ParallelPlan plan_of(int dp, int pp, int tp, const std::string& extra = "{}") {
  Json p = Json::parse(extra);
  p["virtual_gpus"] = dp;
  p["pipeline"] = pp;
  p["tensor"] = tp;
  return resolve_parallel(config::parallel_config(p), dp * pp * tp);
}

std::string model_error(const ParallelPlan& plan, const spec::ModelConfig& model, int64_t micro_batches = 4) {
  return error_of([&] { validate_for_model(plan, model, micro_batches); });
}

TEST(ValidateForModel, FittingLayoutsPass) {
  EXPECT_NO_THROW(validate_for_model(plan_of(2, 2, 2), gpt(6, 4, 64), 4));
  EXPECT_NO_THROW(validate_for_model(plan_of(1, 4, 1), gpt(2, 4, 64), 1));  // 2 blocks + embedding + head
  EXPECT_NO_THROW(validate_for_model(plan_of(1, 1, 4), gpt(1, 4, 64), 1));
  EXPECT_NO_THROW(validate_for_model(plan_of(1, 2, 1, R"({"stages": [[0, 1], [2, 5]]})"), gpt(6, 4, 64), 1));
  EXPECT_NO_THROW(validate_for_model(plan_of(1, 2, 1, R"({"schedule": "interleaved"})"), gpt(6, 4, 64), 4));
  EXPECT_NO_THROW(validate_for_model(plan_of(1, 1, 1, R"({"schedule": "interleaved"})"), gpt(6, 4, 64), 3));
  // An unpaired last linear is replicated, so its width need not divide tp.
  EXPECT_NO_THROW(validate_for_model(plan_of(1, 1, 4), mlp({24, 32, 30, 10}), 1));
  EXPECT_NO_THROW(validate_for_model(plan_of(1, 3, 1), mlp({4, 8, 8, 3}), 1));
}

TEST(ValidateForModel, HeadsAndVocabularyMustSplitOverTensor) {
  EXPECT_EQ(model_error(plan_of(1, 1, 3), gpt(2, 4, 66)),
            "model.heads 4 is not divisible by parallel.tensor 3: each tensor-parallel slot holds whole heads; "
            "choose a tensor width that divides 4");
  EXPECT_EQ(model_error(plan_of(1, 1, 2), gpt(2, 4, 65)),
            "model.vocab_size 65 is not divisible by parallel.tensor 2: pad the vocabulary to a multiple of 2 "
            "(e.g. 66)");
  EXPECT_EQ(model_error(plan_of(2, 1, 4), gpt(2, 8, 50257)),
            "model.vocab_size 50257 is not divisible by parallel.tensor 4: pad the vocabulary to a multiple of 4 "
            "(e.g. 50260)");
}

TEST(ValidateForModel, TooFewLayersForThePipeline) {
  EXPECT_EQ(model_error(plan_of(1, 5, 1), gpt(2, 4, 64)),
            "model.layers 2 (plus the embedding and the head) cannot fill 5 pipeline stages (pipeline 5 x "
            "virtual_stages 1): use fewer stages or more layers");
  EXPECT_EQ(model_error(plan_of(1, 3, 1, R"({"schedule": "interleaved"})"), gpt(3, 4, 64), 6),
            "model.layers 3 (plus the embedding and the head) cannot fill 6 pipeline stages (pipeline 3 x "
            "virtual_stages 2): use fewer stages or more layers");
  EXPECT_EQ(model_error(plan_of(1, 3, 1), mlp({4, 8, 3})),
            "the mlp has 2 layers, too few for 3 pipeline stages: use fewer stages");
}

TEST(ValidateForModel, StageMapsMustCoverTheBlocksInOrder) {
  const spec::ModelConfig m = gpt(6, 4, 64);
  EXPECT_EQ(model_error(plan_of(1, 2, 1, R"({"stages": [[0, 5]]})"), m),
            "parallel.stages lists 1 stages but the layout has 2");
  EXPECT_EQ(model_error(plan_of(1, 2, 1, R"({"schedule": "interleaved", "stages": [[0, 2], [3, 5]]})"), m),
            "parallel.stages lists 2 stages but the layout has 4");
  EXPECT_EQ(model_error(plan_of(1, 2, 1, R"({"stages": [[0, 1], [3, 5]]})"), m),
            "parallel.stages must cover blocks 0..5 in order with contiguous, non-empty ranges; the range [3, 5] "
            "does not follow 1");
  EXPECT_EQ(model_error(plan_of(1, 2, 1, R"({"stages": [[1, 2], [3, 5]]})"), m),
            "parallel.stages must cover blocks 0..5 in order with contiguous, non-empty ranges; the range [1, 2] "
            "does not follow -1");
  // An empty range is refused by the key's own check, before the model is known.
  EXPECT_EQ(error_of([] { plan_of(1, 3, 1, R"({"stages": [[0, 1], [2, 1], [2, 5]]})"); }),
            "config key 'parallel.stages' must be an array of [first, last] layer pairs with 0 <= first <= last, e.g. "
            "[[0, 3], [4, 7]], got [[0,1],[2,1],[2,5]]");
  EXPECT_EQ(model_error(plan_of(1, 2, 1, R"({"stages": [[0, 1], [2, 4]]})"), m),
            "parallel.stages covers blocks 0..4 but the model has 6 blocks");
  EXPECT_EQ(model_error(plan_of(1, 2, 1, R"({"stages": [[0, 3], [4, 5]]})"), mlp({4, 8, 8, 3})),
            "parallel.stages applies to gpt blocks; mlp stages are balanced");
}

TEST(ValidateForModel, MlpWidthsMustSplitOverTensor) {
  EXPECT_EQ(model_error(plan_of(1, 1, 4), mlp({24, 30, 32, 10})),
            "mlp width sizes[1] = 30 is not divisible by parallel.tensor 4");
  // Linears 0 and 1 pair up, as do 2 and 3: the width between the pair (sizes[3]) is split too.
  EXPECT_EQ(model_error(plan_of(1, 1, 4), mlp({24, 32, 32, 30, 10})),
            "mlp width sizes[3] = 30 is not divisible by parallel.tensor 4");
}

TEST(ValidateForModel, InterleavingNeedsMicroBatchesInMultiplesOfThePipeline) {
  EXPECT_EQ(model_error(plan_of(1, 2, 1, R"({"schedule": "interleaved"})"), gpt(6, 4, 64), 3),
            "the interleaved schedule needs gradient_accumulation_steps (micro-batches per step, here 3) to be a "
            "multiple of parallel.pipeline 2");
  EXPECT_EQ(model_error(plan_of(1, 4, 1, R"({"schedule": "interleaved"})"), mlp({4, 8, 8, 8, 8, 8, 8, 8, 3}), 6),
            "the interleaved schedule needs gradient_accumulation_steps (micro-batches per step, here 6) to be a "
            "multiple of parallel.pipeline 4");
}

// ---- context parallelism ----

spec::ModelConfig llama(int64_t seq_len, int heads, int kv_heads) {
  spec::LlamaConfig c;
  c.vocab_size = 64;
  c.seq_len = seq_len;
  c.hidden_size = 8 * heads;
  c.intermediate_size = 64;
  c.num_hidden_layers = 4;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  return c;
}

// rank = tp + tp * (cp + cp * (pp + pp * dp)): the context shards of one stage are neighbours, tp slots nearest.
TEST(ContextLayout, RankMapPutsContextShardsBetweenTensorAndPipeline) {
  const Layout l{2, 2, 2, 2};
  EXPECT_EQ(l.world(), 16);
  EXPECT_EQ(l.vgpu_size(), 8);
  EXPECT_EQ(l.replicas(), 4);
  EXPECT_EQ(l.str(), "dp 2 x pp 2 x tp 2 x cp 2");
  std::set<std::array<int, 4>> seen;
  for (int r = 0; r < l.world(); ++r) {
    const Coord c = coord_of(l, r);
    EXPECT_EQ(c.tp + 2 * (c.cp + 2 * (c.pp + 2 * c.dp)), r);
    EXPECT_EQ(rank_of(l, c), r);
    seen.insert({c.dp, c.pp, c.tp, c.cp});
  }
  EXPECT_EQ(seen.size(), 16u);
  EXPECT_EQ(rank_of(l, Coord{1, 0, 1, 1}), 11);
  EXPECT_EQ(describe_rank_map(Layout{1, 1, 1, 2}, "cpu:"),
            "  rank 0 -> vgpu 0, stage 0, tp slot 0, context shard 0, device cpu:0\n"
            "  rank 1 -> vgpu 0, stage 0, tp slot 0, context shard 1, device cpu:1\n");
}

// The context size is never derived; the other axes share what its shards leave.
TEST(ContextLayout, ResolveTakesContextAsGivenAndDerivesTheRest) {
  const Layout a = layout_for(R"({"context": 2})", 8);
  expect_layout(a, 4, 1, 1);
  EXPECT_EQ(a.cp, 2);
  const Layout b = layout_for(R"({"context": 2, "tensor": 2})", 8);
  expect_layout(b, 2, 1, 2);
  EXPECT_EQ(b.cp, 2);
  const Layout c = layout_for(R"({"context": 2, "virtual_gpus": 1, "tensor": 2})", 8);
  expect_layout(c, 1, 2, 2);
  EXPECT_EQ(layout_for("{}", 8).cp, 1);
  EXPECT_HAS(error_of([] { layout_for(R"({"context": 3})", 8); }),
             "parallel.context 3 does not divide the 8 processes of this job: run with -n 3");
  EXPECT_HAS(error_of([] { layout_for(R"({"context": 2, "virtual_gpus": 2, "pipeline": 1, "tensor": 1})", 8); }),
             "the layout dp 2 x pp 1 x tp 1 x cp 2 needs 4 devices but the job has 8 processes: run with -n 4");
}

TEST(ContextLayout, TheModelMustSplitBySequenceAndHeads) {
  const auto plan = [](const char* json, int world) {
    return resolve_parallel(config::parallel_config(Json::parse(json)), world);
  };
  const ParallelPlan cp2 = plan(R"({"context": 2})", 2), cp2tp2 = plan(R"({"context": 2, "tensor": 2})", 4);
  const ParallelPlan cp3 = plan(R"({"context": 3})", 3), cp4 = plan(R"({"context": 4})", 4);
  // Attention by heads asked for: the heads must split.
  const ParallelPlan cp2tp2_heads = plan(R"({"context": 2, "tensor": 2, "context_attention": "heads"})", 4);
  const ParallelPlan cp3_heads = plan(R"({"context": 3, "context_attention": "heads"})", 3);
  const ParallelPlan cp4_heads = plan(R"({"context": 4, "context_attention": "heads"})", 4);
  EXPECT_NO_THROW(validate_for_model(cp2, llama(16, 4, 2), 1));
  EXPECT_NO_THROW(validate_for_model(cp2tp2, llama(16, 8, 4), 1));
  EXPECT_EQ(model_error(cp2, llama(18, 4, 2)),
            "model.seq_len 18 is not divisible by 2 x parallel.context = 4: each sequence is cut into that many "
            "equal chunks, an early and a late one on each device (which balances the causal mask); choose a seq_len "
            "that is a multiple of 4");
  // Fewer key/value heads a slot than shards: each is repeated over the shards whose query heads use it.
  EXPECT_NO_THROW(validate_for_model(cp2tp2_heads, llama(16, 4, 2), 1));
  EXPECT_NO_THROW(validate_for_model(cp4_heads, llama(16, 8, 2), 1));
  EXPECT_EQ(model_error(cp3_heads, llama(12, 6, 2)),
            "parallel.context 3 does not split the 6 query heads over 2 key/value heads of each of the 1 "
            "tensor-parallel slot: parallel.context_attention \"heads\" regroups each sequence by heads over the "
            "context-parallel devices (all-to-all), so each needs whole heads; choose a context size that divides 2, "
            "or a multiple of 2 that divides 6 (each key/value head is then repeated over the devices that share it); "
            "or set parallel.context_attention \"ring\" (or \"auto\"), which passes key/value blocks around the "
            "devices instead and needs no whole heads");
  // A multiple of the kv heads that does not divide the query heads: a shard's query heads would straddle two.
  EXPECT_HAS(model_error(cp4_heads, llama(16, 6, 2)), "parallel.context 4 does not split the 6 query heads over 2");
  // Under "auto" (the default) such heads run by a ring: any heads split.
  EXPECT_NO_THROW(validate_for_model(cp3, llama(12, 6, 2), 1));
  EXPECT_NO_THROW(validate_for_model(cp4, llama(16, 6, 2), 1));
  using spec::ContextAttention;
  EXPECT_EQ(spec::context_attention_of(llama(16, 6, 2), 4, 1, ContextAttention::Auto), ContextAttention::Ring);
  EXPECT_EQ(spec::context_attention_of(llama(16, 8, 2), 4, 1, ContextAttention::Auto), ContextAttention::Heads);
  EXPECT_EQ(spec::context_attention_of(llama(16, 8, 2), 4, 1, ContextAttention::Ring), ContextAttention::Ring);
  EXPECT_EQ(spec::context_attention_of(llama(16, 6, 2), 1, 1, ContextAttention::Ring), ContextAttention::Heads);
  // A gpt splits as a llama whose key/value heads are its heads.
  EXPECT_NO_THROW(validate_for_model(cp2, gpt(2, 4, 64), 1));
  EXPECT_HAS(model_error(cp2tp2_heads, gpt(2, 2, 64)),
             "parallel.context 2 does not split the 1 query heads over 1 key/value heads of each of the 2 "
             "tensor-parallel slots");
  EXPECT_NO_THROW(validate_for_model(cp2tp2, gpt(2, 2, 64), 1));
  EXPECT_HAS(model_error(cp2, mlp({4, 8, 3})), "an mlp model reads feature vectors: remove parallel.context");
}

// ---- expert parallelism ----

// Expert slots cut each ZeRO group into neighbouring replicas: replica q is slot q % ep of expert group q / ep.
TEST(ExpertLayout, SlotsAreNeighbouringReplicas) {
  const Layout l = layout_for(R"({"virtual_gpus": 2, "context": 2, "expert": 2})", 4);
  EXPECT_EQ(l.ep, 2);
  EXPECT_EQ(l.expert_replicas(), 2);
  EXPECT_EQ(l.str(), "dp 2 x pp 1 x tp 1 x cp 2 (ep 2)");
  for (int r = 0; r < 4; ++r) {
    const Coord c = coord_of(l, r);
    EXPECT_EQ(expert_slot_of(l, c), r % 2) << r;
    EXPECT_EQ(expert_replica_of(l, c), r / 2) << r;
  }
  EXPECT_EQ(layout_for("{}", 4).ep, 1);
  EXPECT_HAS(error_of([] { layout_for(R"({"virtual_gpus": 2, "tensor": 2, "expert": 4})", 4); }),
             "parallel.expert 4 does not divide the 2 ranks that hold the same layers (virtual_gpus 2)");
}

TEST(ExpertLayout, TheModelMustHaveExpertsTheSlotsDivide) {
  spec::ModelConfig moe = llama(16, 4, 2);
  std::get<spec::LlamaConfig>(moe).moe.num_experts = 6;
  std::get<spec::LlamaConfig>(moe).moe.num_experts_per_tok = 2;
  std::get<spec::LlamaConfig>(moe).moe.moe_intermediate_size = 8;
  const auto plan = [](const char* par) { return resolve_parallel(config::parallel_config(Json::parse(par)), 4); };
  EXPECT_NO_THROW(validate_for_model(plan(R"({"virtual_gpus": 4, "expert": 2})"), moe, 1));
  EXPECT_EQ(model_error(plan(R"({"virtual_gpus": 4, "expert": 4})"), moe),
            "parallel.expert 4 does not divide the model's 6 experts: each expert slot holds an equal share; choose "
            "a divisor of 6");
  EXPECT_HAS(model_error(plan(R"({"virtual_gpus": 4, "expert": 2})"), llama(16, 4, 2)),
             "this llama model has none: remove parallel.expert");
}

}  // namespace
}  // namespace tandem::layout
