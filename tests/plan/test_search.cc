// The layout search on cases with known answers, the time model's formulas, and the rates file.
//   - a layer alone larger than a device: only layouts that split it over tp fit;
//   - a model whose training state only fits sharded: only ZeRO layouts fit;
//   - fast links and room to spare: plain data parallelism wins (no bubble, no tp sums, least traffic);
//   - a model that fits nowhere: the table says so and names the memory the smallest layout needs.
// The largest cases (a 70B-class model, the 8B offloaded) are in test_search_large.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <set>

#include "search_test_util.h"
#include "tandem/config/config.h"
#include "tandem/core/units.h"
#include "tandem/parallel/zero/parameter_store.h"
#include "tandem/plan/search.h"

namespace tandem {
namespace {

using config::Json;
using testing::print_search;
using testing::search_options;

TEST(Search, ALayerLargerThanADeviceNeedsTensorParallelism) {
  // Linear 0 is 2048 x 8192: its fp32 values alone are 64 MiB, over the 60 MiB budget. Any layout that keeps
  // the layer whole on a device holds them (ZeRO 0-2) or gathers them (ZeRO-3); tp slices it.
  const spec::MlpConfig model{{2048, 8192, 16}};
  const uint64_t budget = 60ull << 20;
  ASSERT_GT(int64_t{2048} * 8192 * 4, static_cast<int64_t>(budget));
  const auto o = search_options(8, budget, 8);
  const plan::SearchResult r = plan::search_layouts(plan::planned_model(model), o);
  print_search("one layer over a device's memory", r, o);
  ASSERT_FALSE(r.fit.empty());
  for (const auto& c : r.fit) EXPECT_GE(c.setup.plan.layout.tp, 2) << c.name();
  bool some_tp1 = false;
  for (const auto& c : r.no_fit) some_tp1 |= c.setup.plan.layout.tp == 1;
  EXPECT_TRUE(some_tp1);
}

TEST(Search, StateThatOnlyFitsShardedNeedsZero) {
  // One 1024 x 1024 linear (1.05M parameters) on 2 devices: no pipeline (one layer) and tp would only replicate it
  // (an unpaired last linear is not split). Per device, ZeRO-0 holds values, gradients and two moments
  // (16 B per parameter); ZeRO-1 halves the moments and keeps a gradient shard (4 + 4 + 2 + 4 = 14 B); ZeRO-2
  // and 3 add a whole-layer transient gradient (and, at 3, the gathered layer) on top of their shards. A
  // budget of 15 B per parameter leaves exactly ZeRO-1.
  const spec::MlpConfig model{{1024, 1024}};
  const int64_t P = 1024 * 1024 + 1024;
  const auto o = search_options(2, static_cast<uint64_t>(15 * P), 2);
  const plan::SearchResult r = plan::search_layouts(plan::planned_model(model), o);
  print_search("training state that fits only sharded", r, o);
  ASSERT_FALSE(r.fit.empty());
  for (const auto& c : r.fit) {
    EXPECT_EQ(c.setup.plan.layout.dp, 2) << c.name();
    EXPECT_EQ(c.setup.zero_stage, 1) << c.name();
  }
}

TEST(Search, WithRoomAndFastLinksPlainDataParallelismWins) {
  const spec::GptConfig model{256, 32, 64, 4, 4};
  auto o = search_options(4, 0, 16);
  o.rates.dp_bus_bw = o.rates.tp_bus_bw = o.rates.pp_p2p_bw = 1e15;
  o.rates.latency_s = 1e-9;
  const plan::SearchResult r = plan::search_layouts(plan::planned_model(model), o);
  ASSERT_FALSE(r.fit.empty());
  EXPECT_TRUE(r.no_fit.empty());  // no budget: everything fits
  const plan::Candidate& best = r.fit.front();
  EXPECT_EQ(best.setup.plan.layout.dp, 4) << best.name();
  EXPECT_FALSE(best.setup.plan.activation_checkpointing) << best.name();
  EXPECT_EQ(best.setup.micro_batch, 4) << best.name();  // one micro-batch per replica: fewest launches
  for (size_t i = 1; i < r.fit.size(); ++i) EXPECT_GE(r.fit[i - 1].time.tokens_per_s, r.fit[i].time.tokens_per_s);
}

// A llama whose activations dominate (T 4096, width 64): context parallelism divides every per-token tensor and
// attention's work over the whole sequence by cp, which no other axis does (tp keeps the layer inputs whole, pp still
// holds a stage's micro-batches whole), so its smallest peak is the lowest; under a budget between the two, only cp
// layouts fit, and their config keys say so. With SearchOptions::context off none is tried.
TEST(Search, LongSequencesOnlyFitSplitOverContextShards) {
  spec::LlamaConfig m;
  m.vocab_size = 256;
  m.seq_len = 4096;
  m.hidden_size = 64;
  m.intermediate_size = 128;
  m.num_hidden_layers = 4;
  m.num_attention_heads = 8;
  m.num_key_value_heads = 4;
  auto o = search_options(4, 0, 4);
  o.context = false;
  const plan::SearchResult whole = plan::search_layouts(plan::planned_model(m), o);
  o.context = true;
  const plan::SearchResult split = plan::search_layouts(plan::planned_model(m), o);
  int64_t least_whole = INT64_MAX, least_split = INT64_MAX;
  for (const auto& c : whole.fit) {
    EXPECT_EQ(c.setup.plan.layout.cp, 1) << c.name();
    least_whole = std::min(least_whole, c.memory.peak());
  }
  for (const auto& c : split.fit)
    if (c.setup.plan.layout.cp > 1) least_split = std::min(least_split, c.memory.peak());
  EXPECT_GT(split.layouts, whole.layouts);
  ASSERT_LT(least_split, least_whole);
  o.device_memory = static_cast<uint64_t>(least_split + least_whole) / 2;
  const plan::SearchResult r = plan::search_layouts(plan::planned_model(m), o);
  print_search("a long-sequence llama on 4 devices", r, o);
  ASSERT_FALSE(r.fit.empty());
  for (const auto& c : r.fit) EXPECT_GT(c.setup.plan.layout.cp, 1) << c.name();
  const plan::Candidate& best = r.fit.front();
  EXPECT_EQ(best.config().at("parallel").at("context"), best.setup.plan.layout.cp);
  EXPECT_NE(best.name().find(",cp"), std::string::npos) << best.name();
}

// FP8's blockwise recipe under context parallelism: a shard's 128-token tiles must be one device's (nn/linear.h's
// check_fp8_context), so a seq_len of 256 (chunks of 64 at cp 2) gets no cp layout, and 512 (chunks of 128) does; the
// search asks the trainer's rule rather than list a layout the run would refuse. Nor does it list tp 2, whose slots
// would hold 64 of the 128 columns of a tile (Linear::use_fp8), where it used to end in that error.
TEST(Search, Fp8BlockwiseContextShardsOnlyWhereTheirTilesAreWhole) {
  spec::LlamaConfig m;
  m.vocab_size = 256;
  m.hidden_size = 128;
  m.intermediate_size = 256;
  m.num_hidden_layers = 1;
  m.num_attention_heads = 2;
  m.num_key_value_heads = 2;
  spec::Fp8Config fp8;
  fp8.enabled = true;
  fp8.recipe = spec::Fp8Recipe::Blockwise;
  auto o = search_options(2, 0, 2);
  o.context = true;
  for (const int64_t seq_len : {256, 512}) {
    m.seq_len = seq_len;
    const plan::SearchResult r = plan::search_layouts(plan::planned_model(m, {}, fp8), o);
    bool some_cp = false;
    for (const auto& c : r.fit) {
      some_cp |= c.setup.plan.layout.cp > 1;
      EXPECT_EQ(c.setup.plan.layout.tp, 1) << c.name();
    }
    EXPECT_EQ(some_cp, seq_len == 512) << "seq_len " << seq_len;
  }
}

// Grouped-query heads fewer than the context size: 8 query heads over 2 key/value heads split over cp 4 (each kv head
// repeated twice) and over cp 2 beside tp 2 (1 kv head a slot), both offered; 6 query heads over 2 do not split over
// cp 4 (a shard's query heads would straddle two kv heads), so "auto" runs them by a ring, offered too, on CPU
// processes and GPUs alike.
TEST(Search, ContextLayoutsRepeatKeyValueHeadsWhereTheQueryHeadsSplitElseRunARing) {
  spec::LlamaConfig m;
  m.vocab_size = 64;
  m.seq_len = 64;
  m.hidden_size = 48;
  m.intermediate_size = 64;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 8;
  m.num_key_value_heads = 2;
  auto o = search_options(4, 1ull << 40, 4);
  o.context = true;
  // The (tp, cp) pairs of every candidate tried.
  auto pairs = [&](const spec::LlamaConfig& model) {
    std::set<std::pair<int, int>> out;
    const plan::SearchResult r = plan::search_layouts(plan::planned_model(model), o);
    for (const auto* list : {&r.fit, &r.no_fit})
      for (const auto& c : *list) out.insert({c.setup.plan.layout.tp, c.setup.plan.layout.cp});
    return out;
  };
  const auto eight = pairs(m);
  EXPECT_TRUE(eight.count({1, 4}));
  EXPECT_TRUE(eight.count({2, 2}));
  m.num_attention_heads = 6;
  EXPECT_TRUE(pairs(m).count({1, 4}));
  o.rates = plan::builtin_rates("h200");
  EXPECT_TRUE(pairs(m).count({1, 4}));
}

// A mixture of experts whose experts are most of its state: spreading them over replicas (ep) is what fits.
TEST(Search, ExpertsThatOnlyFitSpreadNeedExpertParallelism) {
  spec::LlamaConfig m;
  m.vocab_size = 256;
  m.seq_len = 64;
  m.hidden_size = 64;
  m.intermediate_size = 128;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.family = spec::LlamaFamily::Qwen3Moe;
  m.head_dim = 16;
  m.moe.num_experts = 16;
  m.moe.num_experts_per_tok = 2;
  m.moe.moe_intermediate_size = 256;
  m.moe.norm_topk_prob = true;
  auto o = search_options(4, 0, 8);
  const plan::SearchResult all = plan::search_layouts(plan::planned_model(m), o);
  int64_t least_whole = INT64_MAX, least_spread = INT64_MAX;
  std::set<int> eps;
  for (const auto& c : all.fit) {
    const auto& l = c.setup.plan.layout;
    eps.insert(l.ep);
    EXPECT_EQ(l.replicas() % l.ep, 0) << c.name();
    // Without ZeRO sharding the experts' state, spreading them is what divides it.
    if (c.setup.zero_stage == 0 && l.dp == 4)
      (l.ep > 1 ? least_spread : least_whole) = std::min(l.ep > 1 ? least_spread : least_whole, c.memory.peak());
  }
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4}));
  ASSERT_LT(least_spread, least_whole);
  o.device_memory = static_cast<uint64_t>(least_spread + least_whole) / 2;
  const plan::SearchResult r = plan::search_layouts(plan::planned_model(m), o);
  print_search("a mixture of experts on 4 devices", r, o);
  ASSERT_FALSE(r.fit.empty());
  const auto spread = std::find_if(r.fit.begin(), r.fit.end(), [](const plan::Candidate& c) {
    return c.setup.plan.layout.ep > 1 && c.setup.zero_stage == 0;
  });
  ASSERT_NE(spread, r.fit.end());
  EXPECT_EQ(spread->config().at("parallel").at("expert"), spread->setup.plan.layout.ep);
  EXPECT_NE(spread->name().find(",ep"), std::string::npos) << spread->name();
  for (const auto& c : r.fit)
    EXPECT_FALSE(c.setup.plan.layout.dp == 4 && c.setup.plan.layout.ep == 1 && c.setup.zero_stage == 0) << c.name();
  // A dense model is never given expert slots.
  m.family = spec::LlamaFamily::Qwen3;
  m.moe = {};
  for (const auto& c : plan::search_layouts(plan::planned_model(m), search_options(4, 0, 8)).fit)
    EXPECT_EQ(c.setup.plan.layout.ep, 1) << c.name();
}

TEST(Search, NothingFitsSaysHowMuchMemoryItWouldNeed) {
  const spec::GptConfig model{1024, 64, 128, 2, 4};
  const auto o = search_options(2, 1 << 20, 4);  // 1 MiB: the parameters alone are more
  const plan::SearchResult r = plan::search_layouts(plan::planned_model(model), o);
  print_search("nothing fits", r, o);
  EXPECT_TRUE(r.fit.empty());
  ASSERT_FALSE(r.no_fit.empty());
  for (size_t i = 1; i < r.no_fit.size(); ++i) EXPECT_LE(r.no_fit[i - 1].memory.peak(), r.no_fit[i].memory.peak());
  const std::string table = plan::format_table(r, o, 15);
  EXPECT_NE(table.find("Nothing fits"), std::string::npos) << table;
  const std::string need = format_bytes(static_cast<uint64_t>(r.no_fit.front().memory.peak()));
  EXPECT_NE(table.find(need), std::string::npos) << table;
  EXPECT_NE(r.no_fit.front().why_not.find("resident state alone"), std::string::npos) << r.no_fit.front().why_not;
}

// The seed's situation: Llama-3-8B (T 2048, 16 sequences, bf16) on 4 devices of 24 GiB. Nothing fits on the
// devices (the smallest peak is 29.9 GiB); with host memory the planner answers with an offloaded layout, its config
// keys, its host bytes and a time that counts the copies and the host AdamW, priced with a GPU's rates.
// One device with room beside the offloaded optimizer: the search also offers the first layer's optimizer kept on the
// device (offload_optimizer.ratio below 1; its update is the one the next step would wait for on the host), with less
// host memory and its config keys, and --explain reads its name back to the same prediction.
TEST(Offload, WithRoomTheFirstLayersOptimizerStaysOnTheDevice) {
  const spec::GptConfig model{64, 1024, 256, 2, 4};  // T 64, V 1024, d 256: the embedding and head are the big layers
  plan::SearchOptions o = search_options(1, 0, 8);
  o.offload = true;
  o.host_memory = uint64_t{1} << 30;
  const plan::PlannedModel planned = plan::planned_model(model);
  const plan::SearchResult unbudgeted = plan::search_layouts(planned, o);
  // A budget 1 byte under the smallest peak without offload: only offloaded candidates fit.
  int64_t smallest = INT64_MAX;
  for (const plan::Candidate& c : unbudgeted.fit)
    if (!c.setup.offload_optimizer.enabled()) smallest = std::min(smallest, c.memory.peak());
  o.device_memory = static_cast<uint64_t>(smallest - 1);
  const plan::SearchResult r = plan::search_layouts(planned, o);
  print_search("first layer kept on the device", r, o);
  const plan::Candidate* part = nullptr;
  for (const plan::Candidate& c : r.fit)
    if (c.setup.offload_optimizer.enabled() && c.setup.offload_optimizer.ratio < 1 && !part) part = &c;
  ASSERT_NE(part, nullptr) << plan::format_table(r, o, 30);
  const plan::Candidate* whole = nullptr;
  for (const plan::Candidate& c : r.fit)
    if (c.setup.offload_optimizer.ratio == 1 && c.setup.offload_optimizer.enabled() &&
        c.setup.micro_batch == part->setup.micro_batch &&
        c.setup.plan.activation_checkpointing == part->setup.plan.activation_checkpointing)
      whole = &c;
  ASSERT_NE(whole, nullptr);
  EXPECT_LT(part->memory.host_peak(), whole->memory.host_peak());
  EXPECT_GT(part->memory.peak(), whole->memory.peak());
  EXPECT_LE(part->memory.peak(), static_cast<int64_t>(o.device_memory));
  EXPECT_NE(part->config_keys().find("\"ratio\":"), std::string::npos) << part->config_keys();
  const plan::Setup back = plan::parse_candidate(part->name(), o);
  EXPECT_EQ(back.offload_optimizer.ratio, part->setup.offload_optimizer.ratio) << part->name();
  plan::MemoryModel mm(planned);
  EXPECT_EQ(plan::evaluate(mm, back, o).memory.peak(), part->memory.peak()) << part->name();
  EXPECT_THROW(plan::parse_candidate("dp1,micro8,offload,ratio1.5", o), Error);
  EXPECT_THROW(plan::parse_candidate("dp1,micro8,offload,ratiox", o), Error);
}

// The ratio the planner names keeps exactly the layers asked for under the store's own rule, for layers of any sizes.
TEST(Offload, TheRatioKeepingTheFirstLayersKeepsThemUnderTheStoresRule) {
  for (const std::vector<int64_t>& layers :
       {std::vector<int64_t>{525, 218, 218, 218, 525}, std::vector<int64_t>{7, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 11},
        std::vector<int64_t>{1, 1000000, 1}, std::vector<int64_t>{131334144, 218112000, 218112000, 4096, 525336576}})
    for (size_t kept = 1; kept < layers.size(); ++kept) {
      const double r = parallel::ratio_keeping_first(layers, kept);
      int64_t total = 0;
      for (int64_t n : layers) total += n;
      int64_t seen = 0;
      for (size_t i = 0; i < layers.size(); ++i) {
        seen += layers[i];
        EXPECT_EQ(parallel::ratio_offloads(seen, total, r), i >= kept) << "layer " << i << ", kept " << kept;
      }
    }
  EXPECT_EQ(parallel::ratio_keeping_first({5, 5}, 2), 1.0);
}

TEST(Search, ExplainSpecParsesAndDerivesWhatIsLeftOut) {
  auto o = search_options(4, 0, 64);
  plan::Setup s = plan::parse_candidate("dp2,pp2,tp1,zero1,micro16", o);
  EXPECT_EQ(s.plan.layout.dp, 2);
  EXPECT_EQ(s.plan.layout.pp, 2);
  EXPECT_EQ(s.zero_stage, 1);
  EXPECT_EQ(s.micro_batch, 16);
  EXPECT_EQ(s.micro_batches, 2);
  s = plan::parse_candidate("dp2,micro8,ckpt,v2", o);
  EXPECT_EQ(s.plan.layout.pp, 2);  // the virtual GPU is a pipeline unless told otherwise
  EXPECT_TRUE(s.plan.activation_checkpointing);
  EXPECT_EQ(s.plan.schedule, spec::ScheduleKind::Interleaved);
  EXPECT_EQ(s.micro_batches, 4);
  EXPECT_THROW(plan::parse_candidate("dp3", o), Error);
  EXPECT_THROW(plan::parse_candidate("dp2,micro7", o), Error);
  EXPECT_THROW(plan::parse_candidate("dp2,warp9", o), Error);
  // Context shards are given, never derived: dp fills what they and the virtual GPU leave; the name reads back.
  s = plan::parse_candidate("cp2,micro8,zero3", o);
  EXPECT_EQ(s.plan.layout.cp, 2);
  EXPECT_EQ(s.plan.layout.dp, 2);
  EXPECT_EQ(s.micro_batches, 4);
  plan::Candidate c;
  c.setup = s;
  EXPECT_EQ(c.name(), "dp2,pp1,tp1,cp2,zero3,micro8");
  s = plan::parse_candidate("dp4,ep2,zero1,micro8", o);
  EXPECT_EQ(s.plan.layout.ep, 2);
  c.setup = s;
  EXPECT_EQ(c.name(), "dp4,pp1,tp1,ep2,zero1,micro8");
  s = plan::parse_candidate("dp1,cp2,cpu_ckpt,micro16", o);
  EXPECT_EQ(s.plan.layout.pp, 2);
  EXPECT_EQ(s.plan.layout.cp, 2);
  EXPECT_TRUE(s.plan.cpu_checkpointing);
}

TEST(TimeModel, BubbleFollowsTheSchedule) {
  const spec::GptConfig model{256, 32, 64, 6, 4};
  plan::MemoryModel mm(plan::planned_model(model));
  plan::Setup s;
  s.plan.layout = {1, 4, 1};
  s.micro_batches = 8;
  const plan::TimePrediction gpipe_like = plan::predict_time(mm, mm.predict(s), s, plan::builtin_rates("cpu"));
  EXPECT_NEAR(gpipe_like.bubble_fraction, 3.0 / 11.0, 1e-12);  // (pp - 1) / (m + pp - 1)
  s.plan.schedule = spec::ScheduleKind::Interleaved;
  s.plan.virtual_stages = 2;
  const plan::TimePrediction inter = plan::predict_time(mm, mm.predict(s), s, plan::builtin_rates("cpu"));
  EXPECT_NEAR(inter.bubble_fraction, 1.5 / 9.5, 1e-12);  // the fill divided by v
  s.plan.layout = {4, 1, 1};
  s.plan.virtual_stages = 1;
  s.micro_batches = 2;
  EXPECT_EQ(plan::predict_time(mm, mm.predict(s), s, plan::builtin_rates("cpu")).bubble_fraction, 0.0);
}

// The measured case of docs/benchmarks.md (one H200, 2026-12-03): the 8-layer Llama-3-8B shape (2.80B), T 2048, bf16,
// 64 sequences a step in 2 micro-batches of 32, ZeRO 2 with the optimizer on the host, the update in the backward. The
// host's copies and AdamW run beside the device, so the step is the device's work plus the one unit's update nothing
// hides, not their sum: measured 3.57 s with `ratio` 0.8 (the embedding's optimizer on the device), 3.84 s without.
TEST(TimeModel, OffloadedUpdateRunsBesideTheDevice) {
  const Json llama = {
      {"type", "llama"},        {"vocab_size", 128256},        {"seq_len", 2048},          {"hidden_size", 4096},
      {"num_hidden_layers", 8}, {"num_attention_heads", 32},   {"num_key_value_heads", 8}, {"intermediate_size", 14336},
      {"rope_theta", 500000},   {"tie_word_embeddings", false}};
  const config::TrainConfig cfg = config::parse(
      config::validate({{"model", llama}, {"train_batch_size", 64}, {"train_micro_batch_size_per_gpu", 32}}));
  plan::MemoryModel mm(plan::planned_model(cfg.model));
  plan::Setup s;
  s.plan = layout::resolve_parallel(config::parallel_config(Json()), 1);
  s.zero_stage = 2;
  s.micro_batch = 32;
  s.micro_batches = 2;
  s.dtype_bytes = 2;
  s.backend = plan::Backend::Cuda;
  const plan::Rates h200 = plan::builtin_rates("h200");
  const plan::TimePrediction device = plan::predict_time(mm, mm.predict(s), s, h200);
  s.offload_optimizer.device = spec::OffloadDevice::Cpu;
  s.offload_optimizer.pin_memory = true;
  const auto predict = [&](double ratio, spec::OffloadUpdate update) {
    s.offload_optimizer.ratio = ratio;
    s.offload_optimizer.update = update;
    return plan::predict_time(mm, mm.predict(s), s, h200);
  };
  struct Measured {
    double ratio, step_s;
  };
  for (const Measured& m : {Measured{0.8, 3.57}, Measured{1.0, 3.84}}) {
    const plan::TimePrediction t = predict(m.ratio, spec::OffloadUpdate::InBackward);
    const double chain = t.offload_s + t.host_s;
    const double added = t.step_s + t.offload_hidden_s;  // what adding the chain to the device's work gives
    std::printf(
        "ratio %.1f: predicted %.2f s (measured %.2f s, error %+.1f%%; added up %.2f s, %+.1f%%), device %.2f "
        "s (without offload %.2f s), copies %.2f s, host %.2f s, hidden %.2f s\n",
        m.ratio, t.step_s, m.step_s, 100 * (t.step_s / m.step_s - 1), added, 100 * (added / m.step_s - 1),
        added - chain, device.step_s, t.offload_s, t.host_s, t.offload_hidden_s);
    // No more than the device's work (the run without offload's, which also updates on the device) and the part of
    // the chain nothing hides, the last unit's: well under half of it.
    EXPECT_LE(t.step_s, device.step_s + chain - t.offload_hidden_s);
    EXPECT_GT(t.offload_hidden_s, 0.5 * chain);
    EXPECT_NEAR(t.step_s, m.step_s, 0.1 * m.step_s);
    // Held until the backward's end, the update is what the next forward waits for: nothing hides it.
    const plan::TimePrediction after = predict(m.ratio, spec::OffloadUpdate::AfterBackward);
    EXPECT_EQ(after.offload_hidden_s, 0.0);
    EXPECT_GT(after.step_s, t.step_s);
  }
}

TEST(TimeModel, ModelFlopsAreSixNPlusTwelveLdTPerToken) {
  const spec::GptConfig model{256, 32, 64, 2, 4};
  plan::MemoryModel mm(plan::planned_model(model));
  plan::Setup s;
  s.micro_batch = 4;
  const plan::TimePrediction t = plan::predict_time(mm, mm.predict(s), s, plan::builtin_rates("cpu"));
  const double n = static_cast<double>(mm.logical_parameters());
  EXPECT_DOUBLE_EQ(t.model_flops_per_step, 4 * 32 * (6 * n + 12.0 * 2 * 64 * 32));
  EXPECT_NEAR(t.tokens_per_s, 4 * 32 / t.step_s, 1e-9 * t.tokens_per_s);
}

// The per-op cost is paid once per op the engine runs, however small: the same batch in 8 micro-batches runs each
// micro-batch's ops 8 times (the optimizer's once a step either way), and the step time follows the op count.
TEST(TimeModel, OpOverheadIsPaidPerOpRun) {
  const spec::GptConfig model{256, 32, 64, 2, 4};
  plan::MemoryModel mm(plan::planned_model(model));
  plan::Rates free_ops = plan::builtin_rates("cpu"), costly_ops = free_ops;
  costly_ops.op_overhead_s = 1e-3;
  plan::Setup one, eight;
  one.micro_batch = 8;
  eight.micro_batch = 1;
  eight.micro_batches = 8;
  auto ops = [&](const plan::MemoryPrediction& p, bool actions) {
    double n = 0;
    for (const auto& a : p.work.at(0).actions) n += a.work.ops;
    return actions ? n : p.work.at(0).end.ops;
  };
  const plan::MemoryPrediction p1 = mm.predict(one), p8 = mm.predict(eight);
  EXPECT_EQ(ops(p8, true), 8 * ops(p1, true));
  EXPECT_EQ(ops(p8, false), ops(p1, false));
  EXPECT_GT(ops(p1, true), 2 * 2 * 10);  // some ten ops in each of 2 blocks, forward and backward
  for (const auto* p : {&p1, &p8}) {
    const plan::Setup& s = p == &p1 ? one : eight;
    const double extra =
        plan::predict_time(mm, *p, s, costly_ops).step_s - plan::predict_time(mm, *p, s, free_ops).step_s;
    EXPECT_NEAR(extra, 1e-3 * (ops(*p, true) + ops(*p, false)), 1e-9);
  }
}

TEST(Search, LoraRunsAreNeverOffloaded) {
  // The config refuses offload with "lora", so the search tries none, and --explain refuses to predict one: a Qwen3
  // with adapters on q and v in 64 KiB, where only offloaded state would fit, has no candidate that fits.
  const Json model = {{"type", "llama"},          {"vocab_size", 64},        {"seq_len", 16},  {"hidden_size", 32},
                      {"intermediate_size", 48},  {"num_hidden_layers", 2},  {"head_dim", 16}, {"family", "qwen3"},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
  const config::TrainConfig t = config::parse(config::validate(
      {{"model", model}, {"lora", {{"r", 4}, {"target_modules", {"q_proj", "v_proj"}}}}, {"train_batch_size", 4}}));
  const plan::PlannedModel lora = plan::planned_model(t.model, t.lora);
  EXPECT_FALSE(lora.offloadable);
  plan::SearchOptions o = search_options(1, 64 << 10, 4);
  o.offload = true;
  o.host_memory = 1ull << 30;
  const plan::SearchResult r = plan::search_layouts(lora, o);
  EXPECT_TRUE(r.fit.empty());
  ASSERT_FALSE(r.no_fit.empty());
  for (const auto& c : r.no_fit)
    EXPECT_FALSE(c.setup.offload_optimizer.enabled() || c.setup.offload_param.enabled()) << c.name();
  plan::MemoryModel memory(lora);
  plan::Setup offloaded = r.no_fit.front().setup;
  offloaded.offload_optimizer.device = spec::OffloadDevice::Cpu;
  try {
    plan::evaluate(memory, offloaded, o);
    ADD_FAILURE() << "an offloaded LoRA layout was predicted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a LoRA run offloads nothing"), std::string::npos) << e.what();
  }
}

TEST(Rates, BuiltInsAndFilesRoundTrip) {
  const plan::Rates h = plan::builtin_rates("h200");
  EXPECT_EQ(h.gemm_flops, 650e12);
  EXPECT_EQ(h.grouped_flops, 75e12);
  EXPECT_EQ(h.op_overhead_s, 8e-6);
  EXPECT_EQ(h.tp_bus_bw, 329e9);
  EXPECT_EQ(h.device, "cuda");
  const std::string path = (std::filesystem::temp_directory_path() / "tandem_rates_test.json").string();
  plan::Rates r = plan::builtin_rates("cpu");
  r.name = "test host";
  r.gemm_flops_fp32 = 12.5e9;
  r.attention_forward_flops = 7e9;
  r.attention_backward_flops = 5e9;
  r.grouped_flops = 3e9;
  r.op_overhead_s = 2e-6;
  plan::save_rates(r, path);
  const plan::Rates back = plan::load_rates(path);
  EXPECT_EQ(back.name, "test host");
  EXPECT_EQ(back.gemm_flops_fp32, 12.5e9);
  EXPECT_EQ(back.attention_forward_flops, 7e9);
  EXPECT_EQ(back.attention_backward_flops, 5e9);
  EXPECT_EQ(back.grouped_flops, 3e9);
  EXPECT_EQ(back.op_overhead_s, 2e-6);
  EXPECT_EQ(back.dp_bus_bw, r.dp_bus_bw);
  std::filesystem::remove(path);
  EXPECT_THROW(plan::load_rates("no-such-rates"), Error);
  // A file from before the two attention rates were apart sets both with its one.
  const plan::Rates one = plan::rates_from_json(Json{{"base", "h200"}, {"attention_flops", 300e12}});
  EXPECT_EQ(one.attention_forward_flops, 300e12);
  EXPECT_EQ(one.attention_backward_flops, 300e12);
  EXPECT_EQ(one.gemm_flops, h.gemm_flops);
  EXPECT_THROW(plan::rates_from_json(Json{{"gemm_flop", 1}}), Error);  // a misspelt key is an error
}

}  // namespace
}  // namespace tandem
