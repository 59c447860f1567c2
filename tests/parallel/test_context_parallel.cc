// Context parallelism (parallel.context): each sequence split over cp processes, attention regrouped by heads with
// all-to-all. First the split itself (which positions a shard holds, the all-to-all regrouping and its inverse, the
// sum over the group, FP8's scales on a shard), then equivalence: a llama trained with its sequences split, beside dp
// (every ZeRO stage), pp, tp, documents, LoRA (with dropout: each token's mask drawn by its place in the whole
// sequence), tiles, offload and checkpoints in host memory; a gpt (learned positions at each token's place in the
// whole sequence), tied too; OLMoE (q and k normalised over every head); and a Qwen3-MoE with the balance loss in the
// loss (its sums over the whole sequences), beside expert parallelism and pipelines too (the totals sent back to the
// earlier stages after the last one's cp sum), must match the one-device run within the
// fp32 bounds of equivalence_bounds.h, as every other layout does; with its projections in FP8 under each recipe (the
// shards' amaxes of blocks that span tokens taken over the cp group) within the FP8 bounds; and a run gives the same
// bits twice. Run under mpirun -np TANDEM_TEST_WORLD.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>

#include "equivalence_bounds.h"
#include "equivalence_run.h"
#include "mpi_test_main.h"
#include "tandem/device/cpu_device.h"
#include "tandem/nn/context_split.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/model.h"
#include "tandem/parallel/tensor/context_exchange.h"
#include "test_subset.h"
#include "test_util.h"

namespace tandem {
namespace {

using config::Json;

#if TANDEM_TEST_WORLD == 4
// The split over 4 shards of sequences of T 16: 8 chunks of 2; shard r holds chunks r and 7 - r.
class ContextSplitTest : public ::testing::Test {
 protected:
  ContextSplitTest()
      : groups(layout::make_groups(testing::mpi_world(), layout::Layout{1, 1, 1, 4})),
        exchange(*groups.cp),
        split{groups.coord.cp, 4, &exchange} {}
  // (B, T, W) f32: element (b, t, w) = 1000 b + 10 t + w / 100, each value naming its place.
  Tensor whole(int64_t B, int64_t T, int64_t W) {
    Tensor x = Tensor::empty({B, T, W}, DType::F32, dev, "whole sequences");
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t w = 0; w < W; ++w)
          x.f32()[(b * T + t) * W + w] = static_cast<float>(1000 * b + 10 * t) + static_cast<float>(w) / 100;
    return x;
  }
  device::CpuDevice dev;
  layout::Groups groups;
  parallel::CommContextExchange exchange;
  nn::ContextSplit split;
};

TEST_F(ContextSplitTest, ShardHoldsAnEarlyAndALateChunk) {
  const int r = split.rank;
  const Tensor mine = split.shard_sequences(whole(2, 16, 1));  // (2, 4, 1)
  ASSERT_EQ(mine.shape(), (Shape{2, 4, 1}));
  const std::vector<int64_t> want_positions = {2 * r, 2 * r + 1, 2 * (7 - r), 2 * (7 - r) + 1};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 4; ++i)
      EXPECT_EQ(mine.f32()[b * 4 + i], static_cast<float>(1000 * b + 10 * want_positions[static_cast<size_t>(i)]))
          << "shard " << r << ", sequence " << b << ", token " << i;
}

TEST_F(ContextSplitTest, GatherGivesEverySequenceInOrderForThisShardsSlices) {
  // Two parts of 8 and 4 columns: each shard gets columns [2 r, 2 r + 2) of the first and [8 + r, 9 + r) of the second.
  const int64_t B = 2, T = 16, W = 12;
  const Tensor x = whole(B, T, W);
  const Tensor y = split.gather_sequence(split.shard_sequences(x), {8, 4});  // (B, T, 3)
  ASSERT_EQ(y.shape(), (Shape{B, T, 3}));
  const int r = split.rank;
  const int64_t cols[3] = {2 * r, 2 * r + 1, 8 + r};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_EQ(y.f32()[(b * T + t) * 3 + j], x.f32()[(b * T + t) * W + cols[j]])
            << "shard " << r << " (" << b << ", " << t << ", " << j << ")";
}

TEST_F(ContextSplitTest, ScatterUndoesGather) {
  const Tensor mine = split.shard_sequences(whole(3, 16, 8));  // (3, 4, 8)
  const Tensor back = split.scatter_sequence(split.gather_sequence(mine, {4, 4}), {4, 4});
  ASSERT_EQ(back.shape(), mine.shape());
  EXPECT_EQ(back.to_host_floats(), mine.to_host_floats());
}

TEST_F(ContextSplitTest, SumAddsEveryShardsValues) {
  Tensor x = Tensor::empty({3}, DType::F32, dev, "per shard");  // (3): shard r holds r, 10 r, 100 r
  const float r = static_cast<float>(split.rank);
  for (int64_t i = 0; i < 3; ++i) x.f32()[i] = r * (i == 0 ? 1.0f : i == 1 ? 10.0f : 100.0f);
  split.exchange->sum(x);
  EXPECT_EQ(x.to_host_floats(), (std::vector<float>{6, 60, 600}));  // 0 + 1 + 2 + 3 of each
}

// FP8 on a shard scales as one device does: a Linear's output and input-gradient rows on each shard are one device's,
// and its weight gradient summed over the shards is one device's, within fp32 rounding, under each recipe. The tokens
// of x and dy differ by 2^13 in magnitude between shards (x large only on shard 0, dy only on shard 1, and zero at
// shard 0's early chunk), so one device's scales put the small ones in e4m3's subnormals: a shard that scaled its
// tokens by themselves would keep bits one device rounds away (the weight gradient then is that of the small x alone).
TEST_F(ContextSplitTest, Fp8ScalesAShardsTokensAsOneDevice) {
  const int64_t T = 16, C = 32;  // one sequence: 16 tokens of one device, 4 of each shard
  const float small = std::ldexp(1.0f, -13);
  Tensor x = Tensor::empty({1, T, C}, DType::F32, dev, "x"), dy = Tensor::empty({1, T, C}, DType::F32, dev, "dy");
  testing::fill_normal(x, 5);
  testing::fill_normal(dy, 6);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t w = 0; w < C; ++w) {
      const bool shard0 = t < 2 || t >= 14, shard1 = (t >= 2 && t < 4) || (t >= 12 && t < 14);
      x.f32()[t * C + w] *= shard0 ? 1.0f : small;
      dy.f32()[t * C + w] *= t < 2 ? 0.0f : shard1 ? 1.0f : small;
    }
  // max |a - b| over each row (token) of `got`, relative to the row's largest |want|: at most 1e-5.
  const auto expect_rows_near = [&](const Tensor& got, const Tensor& want, const std::string& what) {
    const std::vector<float> a = got.to_host_floats(), b = want.to_host_floats();
    const int64_t width = got.dim(-1);
    for (int64_t r = 0; r < got.numel() / width; ++r) {
      float diff = 0, scale = 0;
      for (int64_t j = r * width; j < (r + 1) * width; ++j) {
        diff = std::max(diff, std::fabs(a[static_cast<size_t>(j)] - b[static_cast<size_t>(j)]));
        scale = std::max(scale, std::fabs(b[static_cast<size_t>(j)]));
      }
      EXPECT_LE(diff, 1e-5f * scale) << what << " row " << r << " of shard " << split.rank;
    }
  };
  for (const spec::Fp8Recipe recipe :
       {spec::Fp8Recipe::Tensorwise, spec::Fp8Recipe::Rowwise, spec::Fp8Recipe::Blockwise}) {
    SCOPED_TRACE(spec::fp8_recipe_name(recipe));
    spec::Fp8Config fp8;
    fp8.enabled = true;
    fp8.recipe = recipe;
    // The same weights on one device and on the shard (one seed).
    const auto layer = [&](nn::Model& m) -> nn::Linear& {
      auto linear = std::make_unique<nn::Linear>("probe", C, C, false);
      EXPECT_TRUE(linear->use_fp8(fp8));
      nn::Linear& l = *linear;
      m.add(std::move(linear));
      m.materialize(dev, 3);
      m.zero_grad();
      return l;
    };
    nn::Model one, mine;
    nn::Linear &whole_layer = layer(one), &shard_layer = layer(mine);
    nn::Saved saved, shard_saved;
    const Tensor y = whole_layer.forward(x, nn::Batch{}, saved);  // (1, T, C)
    const Tensor dx = whole_layer.backward(dy, nn::Batch{}, saved);
    nn::Batch batch;
    batch.context = split;
    const Tensor y_shard = shard_layer.forward(split.shard_sequences(x), batch, shard_saved);  // (1, T / 4, C)
    const Tensor dx_shard = shard_layer.backward(split.shard_sequences(dy), batch, shard_saved);
    expect_rows_near(y_shard, split.shard_sequences(y), "output");
    expect_rows_near(dx_shard, split.shard_sequences(dx), "input gradient");
    const Tensor dw = mine.parameters()[0]->grad;  // (C, C): this shard's tokens' part
    groups.cp->all_reduce(dw);
    expect_rows_near(dw.view({1, C * C}), one.parameters()[0]->grad.view({1, C * C}), "weight gradient");
  }
}

TEST_F(ContextSplitTest, RefusesSequencesThatDoNotSplitEvenly) {
  const std::string msg = testing::error_of([&] { split.shard_sequences(whole(1, 12, 1)); });
  EXPECT_NE(msg.find("does not split into 2 x 4 equal chunks"), std::string::npos) << msg;
}
#endif

struct Case {
  // "llama" (8 query heads over 4 key/value heads); "llama_tied" (the head tied to the embedding); "llama_docs"
  // (attention inside documents, id 5 ending each); "llama_lora" (LoRA on every projection of a frozen base);
  // "llama_lora_dropout" (the same with lora_dropout 0.2: a shard's tokens must draw the one-device mask);
  // "llama_tiles" (the loss in chunks of 5 tokens, the MLP in tiles of 7); "llama_qwen3" (Qwen3's q_norm and k_norm,
  // on the heads a shard regroups); "gpt", "gpt_tied" and "gpt_docs" (learned positions, multi-head attention; the
  // head tied to the embedding; attention inside documents); "olmoe" (q and k normalised over every head, every MLP a
  // mixture of experts, the balance loss in the loss); "moe" (a Qwen3-MoE, a sparse and a dense layer, the balance loss
  // in the loss); "llama_fp8", "llama_fp8_rowwise" (the blocks' projections in FP8, tensorwise and
  // rowwise); "llama_fp8_blockwise" (blockwise, seq_len 512: each chunk of T / 4 at cp 2 whole 128-token tiles);
  // "llama_fp8_blockwise_tile" (blockwise, a micro-batch of 64 tokens: one tile, its amax the maximum over the shards);
  // "llama_gqa" (8 query heads over 2 key/value heads: at cp 4, or cp 2 beside tp 2, a slot has fewer kv heads than
  // shards and repeats each over the shards that use it); "llama_gqa_docs" (the same, attention inside documents)
  std::string model;
  int dp, pp, tp, cp, zero;
  bool checkpointing = false;
  std::string extra = "";  // "": none; "offload": the optimizer state in host memory; "cpu_ckpt": checkpoints there;
                           // "bf16": compute in bf16, against the one-device bf16 run; "ep2": the experts over 2
                           // replicas (parallel.expert 2)
};

std::string case_name(const Case& c) {
  std::ostringstream os;
  os << c.model << "_dp" << c.dp << "_pp" << c.pp << "_tp" << c.tp << "_cp" << c.cp << "_zero" << c.zero
     << (c.checkpointing ? "_recompute" : "") << (c.extra.empty() ? "" : "_" + c.extra);
  return os.str();
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

std::vector<Case> cases() {
  if (TANDEM_TEST_WORLD == 8)
    return {{"llama", 2, 2, 1, 2, 3},      {"llama", 1, 2, 2, 2, 0, true}, {"llama_docs", 2, 1, 2, 2, 1},
            {"llama_lora", 2, 1, 1, 4, 1}, {"gpt", 2, 1, 1, 4, 1},         {"olmoe", 2, 1, 1, 4, 3, false, "ep2"},
            {"llama_fp8", 2, 1, 1, 4, 1},  {"olmoe", 2, 1, 2, 2, 1}};
  return {{"llama", 1, 1, 1, 4, 0},
          {"llama", 1, 1, 2, 2, 0},
          {"llama", 2, 1, 1, 2, 0},
          {"llama", 2, 1, 1, 2, 1},
          {"llama", 2, 1, 1, 2, 3},
          {"llama", 1, 2, 1, 2, 0, true},
          {"llama_tied", 1, 2, 1, 2, 0},
          {"llama_tied", 1, 1, 1, 4, 0},
          {"llama_docs", 2, 1, 1, 2, 1},
          {"llama_docs", 1, 1, 1, 4, 0, true},
          {"llama_lora", 1, 1, 2, 2, 0},
          {"llama_lora", 2, 1, 1, 2, 3},
          {"llama_lora_dropout", 2, 1, 1, 2, 1},
          {"llama_lora_dropout", 1, 1, 2, 2, 0},
          {"llama_tiles", 1, 1, 2, 2, 0, true},
          {"llama_qwen3", 1, 1, 2, 2, 0},
          {"llama", 2, 1, 1, 2, 2, false, "offload"},
          {"llama", 1, 2, 1, 2, 0, true, "cpu_ckpt"},
          {"llama", 2, 1, 1, 2, 1, false, "bf16"},
          {"gpt", 2, 1, 1, 2, 1},
          {"gpt", 1, 1, 2, 2, 0},
          {"gpt", 1, 1, 1, 4, 0, true},
          {"gpt_tied", 1, 2, 1, 2, 0},
          {"gpt_docs", 1, 1, 1, 4, 0},
          {"gpt_tied", 2, 1, 1, 2, 3},
          {"olmoe", 2, 1, 1, 2, 1},
          {"olmoe", 1, 1, 1, 4, 0},
          {"olmoe", 1, 1, 2, 2, 0},  // the whole norms' sums over tp, on each shard's own tokens
          {"moe", 2, 1, 1, 2, 1},
          {"moe", 2, 1, 1, 2, 3, false, "ep2"},
          {"moe", 2, 1, 1, 2, 0, true, "ep2"},
          {"moe", 1, 2, 1, 2, 0},
          {"olmoe", 1, 2, 1, 2, 0, true},
          {"llama_fp8", 1, 1, 1, 4, 0},
          {"llama_fp8", 2, 1, 1, 2, 3},
          {"llama_fp8", 1, 1, 2, 2, 0},
          {"llama_fp8_rowwise", 2, 1, 1, 2, 1},
          {"llama_fp8_rowwise", 1, 1, 2, 2, 0, true},
          {"llama_fp8_blockwise", 2, 1, 1, 2, 0},
          {"llama_fp8_blockwise_tile", 2, 1, 1, 2, 3},
          {"llama_gqa", 1, 1, 1, 4, 0},
          {"llama_gqa", 1, 1, 2, 2, 0},
          {"llama_gqa_docs", 1, 1, 1, 4, 0, true}};
}

// What the AddressSanitizer + UBSan suite runs (tandem_mpi_subset): the regrouping beside tp, beside ZeRO-3's
// sharded state with documents, and on 8 processes beside pp and tp; a gpt's positions beside tp; the balance sums
// beside expert parallelism's exchanges; the repeated key/value heads' column copies beside tp.
std::map<std::string, std::vector<std::string>> subsets() {
  if (TANDEM_TEST_WORLD == 8) return {{"sanitized", {"llama_dp1_pp2_tp2_cp2_zero0_recompute"}}};
  return {{"sanitized",
           {"llama_dp1_pp1_tp2_cp2_zero0", "llama_dp2_pp1_tp1_cp2_zero3", "gpt_dp1_pp1_tp2_cp2_zero0",
            "moe_dp2_pp1_tp1_cp2_zero3_ep2", "llama_gqa_dp1_pp1_tp2_cp2_zero0"}}};
}

// The mixtures of experts keep micro-batches of 2 sequences on every layout (the balance loss is per micro-batch, as in
// transformers), so their one-device run (dp 1) accumulates 4.
bool is_moe(const Case& c) { return c.model == "olmoe" || c.model == "moe"; }

Json base_config(const Case& c) {
  Json cfg = {{"train_batch_size", 8},
              {"gradient_accumulation_steps", is_moe(c) ? 4 / c.dp : 2},
              {"steps", 4},
              {"seed", 7},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}, {"weight_decay", 0.1}, {"eps", 1e-6}}}}},
              {"gradient_clipping", 1.0},
              {"eval", {{"data", {{"type", "synthetic"}}}, {"steps", 2}}},
              {"data", {{"type", "synthetic"}}}};
  cfg["model"] = {
      {"type", "llama"},          {"vocab_size", 64},         {"seq_len", 16},
      {"hidden_size", 64},        {"intermediate_size", 96},  {"num_hidden_layers", 4},
      {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"tie_word_embeddings", c.model == "llama_tied"}};
  if (c.model.rfind("llama_gqa", 0) == 0) cfg["model"]["num_key_value_heads"] = 2;
  if (c.model == "llama_docs" || c.model == "gpt_docs" || c.model == "llama_gqa_docs")
    cfg["data"] = {{"type", "synthetic"}, {"document_mask", true}, {"eos_token_id", 5}};
  if (c.model == "llama_lora" || c.model == "llama_lora_dropout")
    cfg["lora"] = {{"r", 4}, {"lora_alpha", 8}, {"target_modules", "all-linear"}, {"init_lora_weights", false}};
  if (c.model == "llama_lora_dropout") cfg["lora"]["lora_dropout"] = 0.2;
  if (c.model == "llama_tiles") cfg["tiles"] = {{"loss_tokens", 5}, {"mlp_tokens", 7}};
  if (c.model == "llama_qwen3") cfg["model"]["family"] = "qwen3";
  if (c.model.rfind("gpt", 0) == 0)
    cfg["model"] = {{"type", "gpt"},
                    {"vocab_size", 64},
                    {"seq_len", 16},
                    {"dim", 32},
                    {"layers", 3},
                    {"heads", 4},
                    {"tie_word_embeddings", c.model == "gpt_tied"}};
  if (is_moe(c)) {
    // Small: 4 query heads (one per shard at cp 4), 4 experts, 2 chosen.
    Json& m = cfg["model"];
    m["hidden_size"] = 32;
    m["intermediate_size"] = 48;
    m["num_hidden_layers"] = 2;
    m["num_attention_heads"] = 4;
    m["head_dim"] = 8;
    m["num_experts"] = 4;
    m["num_experts_per_tok"] = 2;
    m["moe_intermediate_size"] = 24;
    m["output_router_logits"] = true;
    m["router_aux_loss_coef"] = 0.05;
  }
  if (c.model == "olmoe") {
    cfg["model"]["family"] = "olmoe";
    cfg["model"]["num_key_value_heads"] = 4;
  }
  if (c.model == "moe") {
    cfg["model"]["family"] = "qwen3_moe";
    cfg["model"]["num_key_value_heads"] = 2;
    cfg["model"]["norm_topk_prob"] = true;
    cfg["model"]["mlp_only_layers"] = {1};
  }
  if (c.extra == "bf16") cfg["bf16"] = {{"enabled", true}};
  if (c.model.rfind("llama_fp8", 0) == 0) {
    // A tensorwise or rowwise scale spans a micro-batch's tokens, so every layout keeps the reference's micro-batch
    // of 4 (fp8_accumulation).
    cfg["fp8"] = {{"enabled", true}};
    for (const char* recipe : {"rowwise", "blockwise"})
      if (c.model.find(recipe) != std::string::npos) cfg["fp8"]["recipe"] = recipe;
  }
  if (c.model == "llama_fp8_blockwise") {
    // Sequences of 4 tiles, one at a time (micro-batch 1), 2 a step over 3 steps of a 2-layer model: a few seconds.
    cfg["model"]["seq_len"] = 512;
    cfg["model"]["num_hidden_layers"] = 2;
    cfg["train_batch_size"] = 2;
    cfg["gradient_accumulation_steps"] = 2;
    cfg["steps"] = 3;
  }
  return cfg;
}

// The gradient accumulation of an FP8 layout of `dp` replicas, keeping one device's micro-batch.
int64_t fp8_accumulation(const Json& cfg, int dp) { return cfg["gradient_accumulation_steps"].get<int64_t>() / dp; }

// The one-device run of each model (and precision), computed once on rank 0.
const Result& reference(const Case& c) {
  static std::map<std::string, Result> cache;
  const std::string key = c.model + (c.extra == "bf16" ? "_bf16" : "");
  auto it = cache.find(key);
  Case one = c;
  one.dp = 1;
  if (it == cache.end()) it = cache.emplace(key, run_training(base_config(one), nullptr)).first;
  return it->second;
}

class ContextParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ContextParallel, SameLossesAndParametersAsOneDevice) {
  const Case& c = GetParam();
  Json cfg = base_config(c);
  cfg["zero_optimization"] = {{"stage", c.zero}};
  cfg["parallel"] = {{"virtual_gpus", c.dp},
                     {"pipeline", c.pp},
                     {"tensor", c.tp},
                     {"context", c.cp},
                     {"activation_checkpointing", c.checkpointing},
                     {"timeout_s", 120}};
  if (c.extra == "offload") cfg["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  if (c.extra == "cpu_ckpt") cfg["parallel"]["cpu_checkpointing"] = true;
  if (c.extra == "ep2") cfg["parallel"]["expert"] = 2;
  const bool fp8 = cfg.contains("fp8");
  if (fp8) cfg["gradient_accumulation_steps"] = fp8_accumulation(cfg, c.dp);
  layout::Layout l{c.dp, c.pp, c.tp, c.cp};
  if (c.extra == "ep2") l.ep = 2;
  layout::Groups groups = layout::make_groups(testing::mpi_world(), l);
  const Result got = run_training(cfg, &groups);
  // As test_equivalence.cc's: tp sums the input gradients' partial sums in another order (LoRA's factors, few and
  // small, feel it most; then the llama's embedding, the gpt's within kF32); bf16 without tp rounds each token as one
  // device does; FP8 as test_equivalence.cc's FP8 cases (the blockwise recipe's gradients in e4m3).
  const Bounds b = fp8                 ? (c.model.find("blockwise") != std::string::npos ? kFp8E4m3 : kFp8)
                   : c.extra == "bf16" ? kBf16
                   : c.tp == 1         ? kF32
                   : c.model.find("lora") != std::string::npos ? kF32LoraTp
                   : c.model.rfind("gpt", 0) == 0              ? kF32
                                                               : kF32TpLlama;
  int failures = 0;
  if (testing::mpi_world().rank() == 0) {
    const Distance d = compare_to_one_device(got, reference(c), b, b.loss * (c.extra == "bf16" || fp8 ? 3 : 1));
    failures = d.failures;
    // A mixture of experts: the balance metrics are the one device's, each step's sums over the whole sequences.
    if (is_moe(c)) failures += compare_moe_metrics(got, reference(c), b.loss);
    std::printf(
        "[%s] %s against one device: first loss %.1e, first gradient norm %.1e, any loss %.1e, a tensor %.1e, "
        "all %.1e\n",
        fp8                 ? "fp8"
        : c.extra == "bf16" ? "bf16"
                            : "fp32",
        case_name(c).c_str(), d.first_loss, d.first_grad_norm, d.worst_loss, d.worst_tensor, d.all);
  }
  // Every rank reports rank 0's verdict, so the job's exit code is the same everywhere.
  EXPECT_EQ(groups.world->all_reduce_scalar(failures), 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ContextParallel,
                         ::testing::ValuesIn(testing::select_subset(cases(), case_name, "ContextParallel", subsets())),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

#if TANDEM_TEST_WORLD == 4
// Deterministic: the same layout trained twice gives the same bits (the all-to-all moves values and sums nothing; the
// gradients' sums over dp x cp run in a fixed order).
TEST(ContextParallelRuns, TheSameBitsTwice) {
  const Case c{"llama_docs", 2, 1, 1, 2, 3};
  Json cfg = base_config(c);
  cfg["zero_optimization"] = {{"stage", c.zero}};
  cfg["parallel"] = {{"virtual_gpus", c.dp}, {"context", c.cp}, {"timeout_s", 120}};
  layout::Groups groups = layout::make_groups(testing::mpi_world(), layout::Layout{c.dp, c.pp, c.tp, c.cp});
  EXPECT_EQ(runs_differ(cfg, groups), 0);
}

// The same with each key/value head repeated over 2 shards: the copies' gradients are summed in one order.
TEST(ContextParallelRuns, TheSameBitsTwiceWithRepeatedKeyValueHeads) {
  const Case c{"llama_gqa", 1, 1, 1, 4, 0};
  Json cfg = base_config(c);
  cfg["parallel"] = {{"virtual_gpus", c.dp}, {"context", c.cp}, {"timeout_s", 120}};
  layout::Groups groups = layout::make_groups(testing::mpi_world(), layout::Layout{c.dp, c.pp, c.tp, c.cp});
  EXPECT_EQ(runs_differ(cfg, groups), 0);
}

// FP8's rule for a context split (nn::check_fp8_context): a shard's tokens a multiple of 16, and under the blockwise
// recipe chunks of whole 128-token tiles or a micro-batch of one tile; anything else refused by name.
TEST(ContextParallelFp8, RefusesSplitsThatCutItsTilesByName) {
  spec::Fp8Config fp8;
  fp8.enabled = true;
  EXPECT_NO_THROW(nn::check_fp8_context(fp8, 1, 32, 2));  // 16 tokens a shard
  std::string msg = testing::error_of([&] { nn::check_fp8_context(fp8, 1, 16, 2); });
  EXPECT_NE(msg.find("a shard's 8 tokens of a micro-batch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(seq_len 32 always does)"), std::string::npos) << msg;
  fp8.recipe = spec::Fp8Recipe::Blockwise;
  EXPECT_NO_THROW(nn::check_fp8_context(fp8, 2, 512, 2));   // chunks of 128
  EXPECT_NO_THROW(nn::check_fp8_context(fp8, 1, 1024, 4));  // chunks of 128
  EXPECT_NO_THROW(nn::check_fp8_context(fp8, 4, 32, 2));    // 128 tokens: one tile
  msg = testing::error_of([&] { nn::check_fp8_context(fp8, 2, 256, 2); });
  EXPECT_NE(msg.find("chunks of seq_len / (2 x 2) = 64 positions"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a multiple of 512 (whole tiles in every chunk)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("micro-batch x seq_len at most 128"), std::string::npos) << msg;
  msg = testing::error_of([&] { nn::check_fp8_context(fp8, 1, 512, 4); });
  EXPECT_NE(msg.find("a multiple of 1024"), std::string::npos) << msg;
  fp8.recipe = spec::Fp8Recipe::Rowwise;
  EXPECT_NO_THROW(nn::check_fp8_context(fp8, 1, 512, 4));
}

// The trainer asks before step 1: a blockwise run whose chunks cut the tiles stops with the rule's message.
TEST(ContextParallelFp8, TheTrainerRefusesBeforeStepOne) {
  Json cfg = base_config({"llama_fp8_blockwise_tile", 1, 1, 1, 2, 0});
  cfg["model"]["seq_len"] = 256;  // micro-batch 4: 1024 tokens, chunks of 64
  cfg["parallel"] = {{"virtual_gpus", 2}, {"context", 2}, {"timeout_s", 120}};
  layout::Groups groups = layout::make_groups(testing::mpi_world(), layout::Layout{2, 1, 1, 2});
  const std::string msg = testing::error_of([&] { run_training(cfg, &groups); });
  EXPECT_NE(msg.find("\"blockwise\" with parallel.context 2 and seq_len 256"), std::string::npos) << msg;
}
#endif

}  // namespace
}  // namespace tandem
