// End-to-end training on one device: the loss falls (synthetic classes, real text), resume is bit-exact,
// bad checkpoints and budgets are refused with their messages, and the op profile covers a run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tandem/config/config.h"
#include "tandem/core/dtype.h"
#include "tandem/ops/profile.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/event_file.h"
#include "tandem/train/lora_weights.h"
#include "tandem/train/trainer.h"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;
using config::Json;

// A real English text that every Debian/Ubuntu machine has (base-files).
const char* kText = "/usr/share/common-licenses/GPL-3";

fs::path fresh_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tandem_test_train_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

Json tiny_gpt_config(int steps) {
  return Json{
      {"train_batch_size", 8},
      {"train_micro_batch_size_per_gpu", 4},
      {"steps", steps},
      {"seed", 5},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}}}}},
      {"gradient_clipping", 1.0},
      {"model", {{"type", "gpt"}, {"vocab_size", 256}, {"seq_len", 32}, {"dim", 32}, {"layers", 2}, {"heads", 4}}},
      {"data", {{"type", "text"}, {"path", kText}}}};
}

std::vector<StepMetrics> train(const Json& cfg, const std::string& out, const std::string& resume = "") {
  TrainOptions opt;
  opt.out_dir = out;
  opt.resume = resume;
  opt.print = false;
  const config::TrainConfig tc = config::parse(config::validate(cfg), 1);
  Trainer t = Trainer::from_config(tc, layout::resolve_parallel(tc.parallel, 1), opt);
  return t.run();
}

TEST(Train, MlpLearnsSyntheticTeacher) {
  Json cfg = {{"train_batch_size", 64},
              {"steps", 300},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}}}}},
              {"model", {{"type", "mlp"}, {"sizes", {32, 64, 10}}}},
              {"data", {{"type", "synthetic"}}}};
  cfg["train_micro_batch_size_per_gpu"] = 32;
  const auto m = train(cfg, "");
  ASSERT_EQ(m.size(), 300u);
  EXPECT_GT(m.front().loss, 2.0);  // about ln(10) at the start
  double last = 0;
  for (size_t i = m.size() - 10; i < m.size(); ++i) last += m[i].loss / 10;
  EXPECT_LT(last, 0.5 * m.front().loss) << "first " << m.front().loss << " mean of the last 10 " << last;
}

TEST(Train, GptLossFallsOnRealText) {
  ASSERT_TRUE(fs::exists(kText)) << kText << " is missing: install base-files";
  Json cfg = tiny_gpt_config(60);
  const auto m = train(cfg, "");
  // Byte-level loss starts at ln(256) = 5.55; unigram statistics alone reach about 3.0.
  EXPECT_NEAR(m.front().loss, 5.55, 0.1);
  double last = 0;
  for (size_t i = m.size() - 5; i < m.size(); ++i) last += m[i].loss / 5;
  EXPECT_LT(last, 3.2) << "mean loss of the last 5 steps";
}

TEST(Train, ResumeIsBitExact) {
  const fs::path a = fresh_dir("a"), b = fresh_dir("b");
  Json cfg = tiny_gpt_config(6);
  cfg["checkpoint"] = {{"every", 3}, {"keep", 5}};
  const auto straight = train(cfg, a.string());
  ASSERT_TRUE(fs::exists(a / "checkpoints" / "step_00000003" / "manifest.json"));

  // Continue from step 3 into another folder: steps 4..6 must repeat exactly.
  fs::create_directories(b);
  const auto resumed = train(cfg, b.string(), (a / "checkpoints" / "step_00000003").string());
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed[i].step, straight[3 + i].step);
    EXPECT_EQ(resumed[i].loss, straight[3 + i].loss) << "step " << resumed[i].step;
  }
  // Final weights are identical byte for byte.
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string final_state = read(a / "checkpoints/step_00000006/rank_0.safetensors");
  EXPECT_GT(final_state.size(), 1000u);
  EXPECT_EQ(final_state, read(b / "checkpoints/step_00000006/rank_0.safetensors"));

  // Written on the spot instead of in the background: the same bytes.
  const fs::path c = fresh_dir("c");
  Json sync = cfg;
  sync["checkpoint"]["async"] = false;
  train(sync, c.string());
  for (const char* step : {"step_00000003", "step_00000006"})
    EXPECT_EQ(read(a / "checkpoints" / step / "rank_0.safetensors"),
              read(c / "checkpoints" / step / "rank_0.safetensors"))
        << step;
  fs::remove_all(c);

  // A run folder resumes from its newest checkpoint; metrics.jsonl keeps one line per step.
  const auto again = train(cfg, a.string(), a.string());
  EXPECT_TRUE(again.empty());  // already at step 6
  std::ifstream metrics(a / "metrics.jsonl");
  int lines = 0;
  for (std::string l; std::getline(metrics, l);) ++lines;
  EXPECT_EQ(lines, 6);
  fs::remove_all(a);
  fs::remove_all(b);
}

// A LoRA run (bf16 base, dropout on, so every draw is keyed by the step) resumes bit-exactly in the same layout: its
// checkpoints hold the adapters and their optimizer state alone, and the frozen base is drawn again from the seed.
TEST(Train, LoraResumeIsBitExactAndCheckpointsHoldTheAdaptersAlone) {
  const fs::path a = fresh_dir("lora_a"), b = fresh_dir("lora_b");
  Json cfg = {{"train_batch_size", 4},
              {"train_micro_batch_size_per_gpu", 2},
              {"steps", 6},
              {"seed", 9},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}, {"weight_decay", 0.1}}}}},
              {"bf16", {{"enabled", true}}},
              {"model",
               {{"type", "llama"},
                {"vocab_size", 256},
                {"seq_len", 16},
                {"hidden_size", 32},
                {"intermediate_size", 48},
                {"num_hidden_layers", 2},
                {"num_attention_heads", 4},
                {"num_key_value_heads", 2}}},
              {"lora",
               {{"r", 4},
                {"lora_alpha", 8},
                {"lora_dropout", 0.1},
                {"target_modules", "all-linear"},
                {"init_lora_weights", false}}},
              {"data", {{"type", "text"}, {"path", kText}}},
              {"checkpoint", {{"every", 3}, {"keep", 5}}}};
  const auto straight = train(cfg, a.string());
  ASSERT_EQ(straight.size(), 6u);
  EXPECT_LT(straight.back().loss, straight.front().loss);
  const auto saved = read_checkpoint_weights((a / "checkpoints" / "step_00000003").string());
  EXPECT_EQ(saved.size(), 2u * 7 * 2);  // A and B of 7 projections in 2 layers
  for (const auto& [name, t] : saved) EXPECT_NE(name.find(".lora_"), std::string::npos) << name;
  fs::create_directories(b);
  const auto resumed = train(cfg, b.string(), (a / "checkpoints" / "step_00000003").string());
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed[i].loss, straight[3 + i].loss) << "step " << resumed[i].step;
    EXPECT_EQ(resumed[i].grad_norm, straight[3 + i].grad_norm) << "step " << resumed[i].step;
  }
  // Resuming it without "lora" is refused as another model's checkpoint.
  Json plain = cfg;
  plain.erase("lora");
  plain["steps"] = 7;
  EXPECT_THROW(train(plain, "", (a / "checkpoints" / "step_00000006").string()), Error);
  fs::remove_all(a);
  fs::remove_all(b);
}

// A LoRA run without model.from_pretrained trains on a base drawn from its seed; export (--merge) draws the same base
// from the checkpoint's config: exactly what the run held (fp32 compute).
// In bf16 the run holds the frozen base rounded to nearest even, from fp32 draws made on its device: the host's draw,
// rounded.
TEST(Train, LoraBaseFromTheSeedIsDrawnAgainForExport) {
  for (const bool bf16 : {false, true}) {
    Json cfg = {
        {"train_batch_size", 2},
        {"steps", 2},
        {"seed", 17},
        {"model", {{"type", "gpt"}, {"vocab_size", 64}, {"seq_len", 8}, {"dim", 16}, {"layers", 2}, {"heads", 2}}},
        {"lora", {{"r", 2}, {"target_modules", "all-linear"}}},
        {"data", {{"type", "synthetic"}}}};
    if (bf16) cfg["bf16"] = {{"enabled", true}};
    const config::TrainConfig tc = config::parse(config::validate(cfg), 1);
    TrainOptions opt;
    opt.print = false;
    Trainer t = Trainer::from_config(tc, layout::resolve_parallel(tc.parallel, 1), opt);
    t.run();
    const auto held = t.engine().collect_parameters();
    const auto base = lora_base_weights(tc.raw);
    ASSERT_EQ(base.size() + 2 * 4 * 2, held.size());  // the adapters (A, B of 4 projections in 2 blocks) besides
    for (const auto& [name, tensor] : base) {
      std::vector<float> want = tensor.values;
      if (bf16)
        for (float& v : want) v = bf16_to_f32(f32_to_bf16(v));
      EXPECT_EQ(want, held.at(name)) << name << (bf16 ? " in bf16" : "");
    }
  }
}

// "data": {"document_mask": true}: attention stays inside each document of a window. On windows with several
// documents the loss changes; where no window holds an end of document, it is the plain causal run's, bit for bit.
TEST(Train, DocumentMaskKeepsAttentionInsideDocuments) {
  const fs::path dir = fresh_dir("documents");
  fs::create_directories(dir);
  auto token_file = [&](const std::string& name, bool with_ends) {
    std::ofstream out(dir / name, std::ios::binary);
    for (int i = 0; i < 400; ++i) {
      const uint16_t id = with_ends && i % 7 == 6 ? 5 : static_cast<uint16_t>(6 + (i * 37) % 50);
      out.write(reinterpret_cast<const char*>(&id), 2);
    }
    return (dir / name).string();
  };
  auto first_loss = [&](const std::string& path, bool documents) {
    Json cfg = {{"train_batch_size", 4},
                {"steps", 1},
                {"model",
                 {{"type", "llama"},
                  {"vocab_size", 64},
                  {"seq_len", 16},
                  {"hidden_size", 32},
                  {"intermediate_size", 48},
                  {"num_hidden_layers", 2},
                  {"num_attention_heads", 4},
                  {"num_key_value_heads", 2}}},
                {"data", {{"type", "tokens"}, {"path", path}}}};
    if (documents) cfg["data"].update({{"document_mask", true}, {"eos_token_id", 5}});
    return train(cfg, "").at(0).loss;
  };
  const std::string ends = token_file("ends.bin", true), none = token_file("none.bin", false);
  EXPECT_GT(std::fabs(first_loss(ends, true) - first_loss(ends, false)), 1e-4);
  EXPECT_EQ(first_loss(none, true), first_loss(none, false));
  fs::remove_all(dir);
}

TEST(Train, AsyncCheckpointHostBytesAreTheRankFilesData) {
  // What the planner adds for a background checkpoint: the owned fp32 values and both moments.
  const config::TrainConfig tc = config::parse(config::validate(tiny_gpt_config(1)), 1);
  TrainOptions opt;
  opt.print = false;
  Trainer t = Trainer::from_config(tc, layout::resolve_parallel(tc.parallel, 1), opt);
  t.run();
  const uint64_t bytes = async_checkpoint_host_bytes(t.engine(), layout::Coord{});
  EXPECT_EQ(bytes, static_cast<uint64_t>(t.engine().model().num_parameters()) * 12);
  layout::Groups groups = layout::make_single_process_groups();
  CheckpointWriter writer(t.engine(), groups, CheckpointWriterOptions{});
  EXPECT_EQ(writer.host_bytes(), bytes);
  EXPECT_GT(writer.rank_file_bytes(), bytes);  // and the header
}

TEST(Train, TensorBoardRecordChecksumIsCrc32c) {
  // CRC-32C's check value (RFC 3720) and TFRecord's mask of it.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(Train, CorruptedCheckpointRefusedByName) {
  const fs::path a = fresh_dir("corrupt");
  Json cfg = tiny_gpt_config(2);
  train(cfg, a.string());
  const fs::path file = a / "checkpoints/step_00000002/rank_0.safetensors";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 10));
    f.put('\x7f');
  }
  cfg["steps"] = 4;
  try {
    train(cfg, a.string(), a.string());
    FAIL() << "expected the corrupted checkpoint to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("corrupted"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank_0.safetensors"), std::string::npos) << e.what();
  }
  fs::remove_all(a);
}

TEST(Train, CheckpointOfAnotherModelRefused) {
  const fs::path a = fresh_dir("other");
  Json cfg = tiny_gpt_config(1);
  train(cfg, a.string());
  cfg["model"]["dim"] = 64;
  cfg["steps"] = 2;
  try {
    train(cfg, "", a.string());
    FAIL() << "expected a checkpoint of another model to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("of another model"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("wte.weight"), std::string::npos) << e.what();
  }
  fs::remove_all(a);
}

// Mixed precision on the CPU backend: bf16 (or f16) activations and weights for compute, fp32 master weights,
// moments and gradient reduction. The same run stays within bf16 rounding of the fp32 one.
TEST(Train, Bf16AndFp16FollowFp32) {
  Json cfg = tiny_gpt_config(8);
  const auto f32 = train(cfg, "");
  cfg["bf16"] = {{"enabled", true}};
  const auto bf16 = train(cfg, "");
  cfg.erase("bf16");
  cfg["fp16"] = {{"enabled", true}};
  const auto fp16 = train(cfg, "");
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_NEAR(bf16[i].loss, f32[i].loss, 2e-2 * f32[i].loss) << "step " << i + 1;
    EXPECT_NEAR(fp16[i].loss, f32[i].loss, 5e-3 * f32[i].loss) << "step " << i + 1;
    EXPECT_FALSE(fp16[i].skipped);
  }
  EXPECT_NE(bf16.back().loss, f32.back().loss);  // it really computed in bf16
}

// fp16 dynamic loss scaling: a scale so large that the scaled gradients overflow fp16 makes the first steps
// skip their update and halve the scale (after `hysteresis` overflows) until the gradients fit; then the
// loss falls as it does without scaling.
TEST(Train, Fp16OverflowSkipsAndBacksOff) {
  Json cfg = tiny_gpt_config(30);
  cfg["fp16"] = {{"enabled", true}, {"initial_scale_power", 32}, {"hysteresis", 1}, {"loss_scale_window", 1000}};
  const auto m = train(cfg, "");
  int skipped = 0;
  for (const auto& s : m) skipped += s.skipped;
  EXPECT_GE(skipped, 2);
  EXPECT_TRUE(m.front().skipped);
  EXPECT_LT(m.back().loss_scale, std::ldexp(1.0, 32));
  EXPECT_FALSE(m.back().skipped);
  EXPECT_LT(m.back().loss, m.front().loss - 0.3);
}

// The op profile over a whole run: the same losses as without it, a row per op that ran (one sum_squares_total per
// step for the gradient norm, fc's bias inside the GELU's pass, the other biases and the residual adds inside the
// products), and the step's time split between ops and the rest.
TEST(Train, OpProfileChangesNoLossAndCoversTheStep) {
  Json cfg = tiny_gpt_config(4);
  cfg["bf16"] = {{"enabled", true}};
  const auto plain = train(cfg, "");
  ops::profile::reset();
  ops::profile::set_enabled(true);
  const auto timed = train(cfg, "");
  ops::profile::set_enabled(false);
  const ops::profile::Summary s = ops::profile::summary();
  ops::profile::reset();
  ASSERT_EQ(timed.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(timed[i].loss, plain[i].loss) << "step " << i + 1;
    EXPECT_EQ(timed[i].grad_norm, plain[i].grad_norm) << "step " << i + 1;
  }
  EXPECT_EQ(s.steps_run, 4);
  EXPECT_EQ(s.steps, 2);
  auto calls = [&](const std::string& op) {
    for (const auto& r : s.ops)
      if (r.op == op && r.detail.empty()) return r.calls;
    return 0.0;
  };
  EXPECT_EQ(calls("sum_squares_total"), 1);  // the gradient norm: one wait for all segments
  EXPECT_EQ(calls("sum_squares"), 0);
  EXPECT_EQ(calls("bias_gelu_forward"), 2 * 2);  // 2 blocks x 2 micro-batches
  EXPECT_EQ(calls("gelu_forward"), 0);
  EXPECT_EQ(calls("add_bias"), 0);                      // every bias added inside its product
  EXPECT_EQ(calls("linear_forward"), 2 * (2 * 4 + 1));  // qkv, proj, fc, out of each block and the head
  EXPECT_EQ(calls("add"), 0);                           // the residuals: inside the products and the LayerNorm backward
  EXPECT_EQ(calls("linear_weight_grad"), 2 * (2 * 4 + 1));  // the same layers' weight (and bias) gradients
  EXPECT_EQ(calls("bias_backward"), 0);                     // inside linear_weight_grad
  EXPECT_EQ(calls("layernorm_backward_add"), 2 * 2 * 2);    // ln1 and ln2 of each block, with the skip's gradient
  EXPECT_EQ(calls("layernorm_backward"), 2);                // the final LayerNorm, once per micro-batch
  EXPECT_GT(calls("matmul"), 0);
  EXPECT_GT(s.op_ms(), 0);
  EXPECT_GE(s.step_ms, s.op_ms());
}

// "eval": the held-out loss after steps 2 and 4 and after the last, written to metrics.jsonl, and nothing of the
// training changed by it (the same losses and gradient norms as without it), in fp32 and bf16.
TEST(Train, EvalReportsHeldOutLossAndChangesNoTraining) {
  for (bool bf16 : {false, true}) {
    Json cfg = tiny_gpt_config(5);
    if (bf16) cfg["bf16"] = {{"enabled", true}};
    const auto plain = train(cfg, "");
    cfg["eval"] = {{"data", {{"type", "text"}, {"path", kText}}}, {"every", 2}, {"steps", 3}};
    const fs::path dir = fresh_dir(std::string("eval") + (bf16 ? "_bf16" : ""));
    const auto with_eval = train(cfg, dir.string());
    ASSERT_EQ(with_eval.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_EQ(with_eval[i].loss, plain[i].loss) << "step " << i + 1;
      EXPECT_EQ(with_eval[i].grad_norm, plain[i].grad_norm) << "step " << i + 1;
      EXPECT_EQ(with_eval[i].evaluated, i == 1 || i == 3 || i == 4) << "step " << i + 1;
      if (with_eval[i].evaluated) {
        EXPECT_TRUE(std::isfinite(with_eval[i].val_loss));
        EXPECT_GT(with_eval[i].val_loss, 0);
      }
    }
    // The held-out loss falls as the model learns the text.
    EXPECT_LT(with_eval[4].val_loss, with_eval[1].val_loss);
    std::ifstream metrics(dir / "metrics.jsonl");
    std::string line;
    int lines = 0, with_val = 0;
    while (std::getline(metrics, line)) {
      ++lines;
      const Json j = Json::parse(line);
      if (j.contains("val_loss")) {
        ++with_val;
        EXPECT_EQ(j.at("val_loss").get<double>(), with_eval[static_cast<size_t>(j.at("step").get<int>() - 1)].val_loss);
      }
    }
    EXPECT_EQ(lines, 5);
    EXPECT_EQ(with_val, 3);
    fs::remove_all(dir);
  }
}

// With the training data as eval data, eval batch k is training's step-k batch: with lr 0 (no update) the
// evaluation after step 1 sees step 1's weights and batch, so it gives step 1's loss exactly.
TEST(Train, EvalOfTheTrainingDataWithoutAnUpdateIsTheStepsLoss) {
  Json cfg = tiny_gpt_config(1);
  cfg["optimizer"]["params"]["lr"] = 0.0;
  cfg["eval"] = {{"data", cfg["data"]}, {"steps", 1}};
  const auto runs = train(cfg, "");
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_TRUE(runs[0].evaluated);
  EXPECT_EQ(runs[0].val_loss, runs[0].loss);
}

TEST(Train, BudgetTooSmallNamesTheNumbers) {
  Json cfg = tiny_gpt_config(1);
  cfg["device_memory"] = "64KiB";
  try {
    train(cfg, "");
    FAIL() << "expected the budget to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("64.0 KiB"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 0 parameters"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::train
