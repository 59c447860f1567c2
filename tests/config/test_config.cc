// Tests of tandem_config: defaults, unknown-key suggestions, batch arithmetic, Adam and AdamW, the schedulers' keys,
// Tandem's own keys (tiles, offload_optimizer's update and upload_piece). Overrides and files: test_load_config.cc.
// DeepSpeed's other keys are tested in test_deepspeed_keys.cc, "auto" values in test_auto_values.cc; model, data and
// parallel semantics by their own modules.
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "tandem/config/config.h"
#include "tandem/core/error.h"
#include "test_util.h"

namespace tandem::config {
namespace {

using tandem::testing::error_of;

TEST(Config, DefaultsFilled) {
  const Json v = validate(mlp_cfg());
  EXPECT_EQ(v["steps"], 100);
  EXPECT_EQ(v["seed"], 1234);
  EXPECT_EQ(v["steps_per_print"], 1);
  EXPECT_EQ(v["optimizer"]["type"], "AdamW");
  EXPECT_DOUBLE_EQ(v["optimizer"]["params"]["lr"].get<double>(), 1e-3);
  EXPECT_DOUBLE_EQ(v["optimizer"]["params"]["betas"][1].get<double>(), 0.999);
  EXPECT_DOUBLE_EQ(v["optimizer"]["params"]["eps"].get<double>(), 1e-8);
  EXPECT_EQ(v["scheduler"]["type"], "Constant");
  EXPECT_EQ(v["zero_optimization"]["stage"], 0);
  EXPECT_EQ(v["fp16"]["enabled"], false);
  EXPECT_EQ(v["fp16"]["initial_scale_power"], 16);
  EXPECT_EQ(v["fp16"]["loss_scale_window"], 1000);
  EXPECT_EQ(v["fp16"]["hysteresis"], 2);
  EXPECT_EQ(v["bf16"]["enabled"], false);
  EXPECT_EQ(v["model"]["activation"], "relu");
  EXPECT_EQ(v["data"]["type"], "synthetic");
  EXPECT_EQ(v["data"]["samples"], 65536);
  EXPECT_EQ(v["checkpoint"]["every"], 0);
  EXPECT_EQ(v["checkpoint"]["keep"], 3);
  EXPECT_FALSE(v.contains("device_memory"));
  EXPECT_EQ(validate(v), v) << "validate must be idempotent";

  const TrainConfig tc = parse(v, 2);
  EXPECT_EQ(tc.batch.global, 8);
  EXPECT_EQ(tc.batch.micro, 4);
  EXPECT_EQ(tc.batch.accum, 1);
  EXPECT_EQ(tc.optimizer.type, OptimizerType::AdamW);
  EXPECT_DOUBLE_EQ(tc.optimizer.beta1, 0.9);
  EXPECT_EQ(model_type(tc.model), "mlp");
  EXPECT_EQ(std::get<MlpConfig>(tc.model).sizes, (std::vector<int64_t>{4, 8, 3}));
  EXPECT_EQ(tc.device_memory_bytes, 0u);
  EXPECT_FALSE(tc.parallel.planned);
  EXPECT_FALSE(tc.parallel.virtual_gpus || tc.parallel.pipeline || tc.parallel.tensor);
}

TEST(Config, EvalHeldOutData) {
  Json c = gpt_cfg();
  EXPECT_FALSE(parse(validate(c), 1).eval.enabled);
  c["eval"] = {{"data", {{"type", "tokens"}, {"path", "val.bin"}}}};
  const TrainConfig t = parse(validate(c), 1);
  EXPECT_TRUE(t.eval.enabled);
  EXPECT_EQ(t.eval.data.type, DataType::Tokens);
  EXPECT_EQ(t.eval.data.path, "val.bin");
  EXPECT_EQ(t.eval.data.token_bytes, 2);
  EXPECT_EQ(t.eval.every, 0);  // after the last step only
  EXPECT_EQ(t.eval.steps, 10);
  c["eval"]["every"] = 50;
  c["eval"]["steps"] = 4;
  EXPECT_EQ(parse(validate(c), 1).eval.every, 50);
  EXPECT_EQ(parse(validate(c), 1).eval.steps, 4);
  c["eval"] = {{"every", 10}};
  EXPECT_HAS(error_of([&] { validate(c); }), "missing required config key 'eval.data'");
  c["eval"] = {{"data", {{"type", "synthetic"}}}, {"evry", 10}};
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'eval.evry': did you mean 'eval.every'?");
  c["eval"] = {{"data", {{"type", "tokens"}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "'eval.data.path'");
  c["eval"] = {{"data", {{"type", "synthetic"}}}, {"steps", 0}};
  EXPECT_HAS(error_of([&] { validate(c); }), "'eval.steps'");
  Json m = mlp_cfg();
  m["eval"] = {{"data", {{"type", "text"}, {"path", "x.txt"}}}};
  EXPECT_HAS(error_of([&] { validate(m); }), "eval.data.type 'text' yields token sequences");
}

TEST(Config, SchedulerAndOptimizerVariants) {
  Json c = mlp_cfg();
  c["steps"] = 50;
  c["optimizer"] = {{"type", "adam"}, {"params", {{"weight_decay", 0.1}}}};
  c["scheduler"] = {{"type", "warmupcosinelr"}, {"params", {{"warmup_num_steps", 5}}}};
  const TrainConfig tc = parse(validate(c), 1);
  EXPECT_EQ(tc.optimizer.type, OptimizerType::Adam);
  EXPECT_EQ(tc.optimizer.weight_decay, 0.1);  // DeepSpeed's Adam keeps its decay, decoupled by default
  EXPECT_TRUE(tc.optimizer.adam_w_mode);
  EXPECT_EQ(tc.scheduler.type, SchedulerType::WarmupCosineLR);
  EXPECT_EQ(tc.scheduler.total_num_steps, 50);
  EXPECT_DOUBLE_EQ(tc.scheduler.cos_min_ratio, 1e-4);  // DeepSpeed's default floor
  EXPECT_EQ(tc.scheduler.warmup_type, WarmupType::Log);
  EXPECT_EQ(tc.scheduler.warmup_num_steps, 5);

  c["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"cos_min_ratio", 0.2}}}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "unknown key 'scheduler.params.cos_min_ratio' for scheduler type 'WarmupLR'");
  c["scheduler"] = {{"type", "Cosine"}};
  EXPECT_HAS(error_of([&] { validate(c); }), "'scheduler.type' must be one of \"Constant\", \"WarmupLR\"");
}

TEST(Config, AdamAndAdamW) {
  Json c = mlp_cfg();
  c["optimizer"] = {{"type", "Adam"}, {"params", {{"weight_decay", 0.05}, {"adam_w_mode", false}}}};
  TrainConfig tc = parse(validate(c), 1);
  EXPECT_FALSE(tc.optimizer.adam_w_mode);  // L2: the decay is added to the gradient
  EXPECT_DOUBLE_EQ(tc.optimizer.weight_decay, 0.05);
  c["optimizer"] = {{"type", "AdamW"}, {"params", {{"weight_decay", 0.05}}}};
  tc = parse(validate(c), 1);
  EXPECT_TRUE(tc.optimizer.adam_w_mode);
  EXPECT_EQ(tc.raw["optimizer"]["params"]["adam_w_mode"], true);
  c["optimizer"]["params"]["adam_w_mode"] = false;
  EXPECT_HAS(error_of([&] { validate(c); }),
             "optimizer.params.adam_w_mode is false but optimizer.type is \"AdamW\", whose weight decay is always "
             "decoupled");
  c["optimizer"]["params"]["adam_w_mode"] = "yes";
  EXPECT_HAS(error_of([&] { validate(c); }), "'optimizer.params.adam_w_mode' must be true or false");
}

TEST(Config, SchedulersWithDeepSpeedsDefaults) {
  Json c = mlp_cfg();
  c["scheduler"] = {{"type", "WarmupLR"}};
  TrainConfig tc = parse(validate(c), 1);
  EXPECT_EQ(tc.scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(tc.scheduler.warmup_type, WarmupType::Log);
  EXPECT_DOUBLE_EQ(tc.scheduler.warmup_min_lr, 0.0);
  EXPECT_DOUBLE_EQ(tc.scheduler.peak_lr, 1e-3);  // no warmup_max_lr: the optimizer's lr
  EXPECT_TRUE(tc.notices.empty());

  c["scheduler"] = {{"type", "WarmupDecayLR"}, {"params", {{"warmup_num_steps", 10}, {"warmup_type", "Linear"}}}};
  tc = parse(validate(c), 1);
  EXPECT_EQ(tc.scheduler.type, SchedulerType::WarmupDecayLR);
  EXPECT_EQ(tc.scheduler.total_num_steps, 100);  // the run's steps
  EXPECT_EQ(tc.scheduler.warmup_type, WarmupType::Linear);

  c["scheduler"] = {{"type", "WarmupDecayLR"}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "scheduler.params.warmup_num_steps (1000, DeepSpeed's default) exceeds scheduler.params.total_num_steps "
             "(100, the run's steps)");
  c["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"warmup_type", "cubic"}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "'scheduler.params.warmup_type' must be one of \"log\", \"linear\"");
  c["scheduler"] = {{"type", "WarmupCosineLR"}, {"params", {{"warmup_max_lr", 0.1}, {"warmup_num_steps", 5}}}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "unknown key 'scheduler.params.warmup_max_lr' for scheduler type 'WarmupCosineLR': only another type "
             "uses it");
  c["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"last_batch_iteration", 5}}}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "scheduler.params.last_batch_iteration 5: Tandem's schedule follows the run's step count");
  c["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"last_batch_iteration", -1}}}};  // DeepSpeed's default
  EXPECT_TRUE(parse(validate(c), 1).no_effect_keys.empty());
}

TEST(Config, WarmupMaxLrIsThePeak) {
  Json c = mlp_cfg();
  c["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 3e-4}, {"warmup_num_steps", 10}}}};
  TrainConfig tc = parse(validate(c), 1);
  EXPECT_DOUBLE_EQ(tc.scheduler.peak_lr, 3e-4);
  EXPECT_DOUBLE_EQ(tc.optimizer.lr, 3e-4) << "an absent optimizer lr is the schedule's peak";
  EXPECT_TRUE(tc.notices.empty());
  // Both given and different: warmup_max_lr wins, as in DeepSpeed, and the user is told.
  c["optimizer"] = {{"params", {{"lr", 1e-2}}}};
  tc = parse(validate(c), 1);
  EXPECT_DOUBLE_EQ(tc.scheduler.peak_lr, 3e-4);
  EXPECT_DOUBLE_EQ(tc.optimizer.lr, 1e-2);
  ASSERT_EQ(tc.notices.size(), 1u);
  EXPECT_EQ(tc.notices[0],
            "warning: optimizer.params.lr (0.01) is not used: scheduler.params.warmup_max_lr (0.0003) is the "
            "schedule's peak, as in DeepSpeed");
  c["optimizer"] = {{"params", {{"lr", 3e-4}}}};
  EXPECT_TRUE(parse(validate(c), 1).notices.empty());
}

TEST(Config, UnknownKeysSuggestNearest) {
  Json c = mlp_cfg();
  c["optimizer"] = {{"params", {{"lrr", 0.1}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'optimizer.params.lrr': did you mean 'optimizer.params.lr'?");

  c = mlp_cfg();
  c["train_batch_sise"] = 4;
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'train_batch_sise': did you mean 'train_batch_size'?");

  c = mlp_cfg();
  c["zero_optimization"] = {{"stag", 1}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "unknown key 'zero_optimization.stag': did you mean 'zero_optimization.stage'?");

  c = mlp_cfg();
  c["fp16"] = {{"enabled", true}, {"loss_scale_windw", 10}};
  EXPECT_HAS(error_of([&] { validate(c); }), "did you mean 'fp16.loss_scale_window'?");

  c = mlp_cfg();
  c["model"]["activaton"] = "gelu";
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'model.activaton': did you mean 'model.activation'?");

  c = mlp_cfg();
  c["parallel"] = {{"pipline", 2}};
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'parallel.pipline': did you mean 'parallel.pipeline'?");

  c = mlp_cfg();
  c["checkpoint"] = {{"Every", 2}};
  EXPECT_HAS(error_of([&] { validate(c); }), "did you mean 'checkpoint.every'?");

  c = mlp_cfg();
  c["completely_unrelated_thing"] = 1;
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'completely_unrelated_thing': valid keys are ");
}

TEST(Config, OtherModelTypeKeysAreUnknown) {
  Json c = gpt_cfg();
  c["model"]["sizes"] = {1, 2};
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'model.sizes' for model type 'gpt'");
  c = mlp_cfg();
  c["model"]["heads"] = 2;
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'model.heads' for model type 'mlp'");
  c = mlp_cfg();
  c["data"] = {{"type", "synthetic"}, {"path", "x"}};
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'data.path' for data type 'synthetic'");
}

TEST(Config, TypesAndRanges) {
  Json c = mlp_cfg();
  c["steps"] = 0;
  EXPECT_HAS(error_of([&] { validate(c); }), "config key 'steps' must be a positive integer, got 0");
  c = mlp_cfg();
  c["steps"] = 2.5;
  EXPECT_HAS(error_of([&] { validate(c); }), "config key 'steps' must be a positive integer, got 2.5");
  c = mlp_cfg();
  c["steps"] = 1e3;  // integral floats are accepted
  EXPECT_EQ(validate(c)["steps"], 1000);
  c = mlp_cfg();
  c["gradient_clipping"] = -1;
  EXPECT_HAS(error_of([&] { validate(c); }), "'gradient_clipping' must be a number >= 0, got -1");
  c = mlp_cfg();
  c["zero_optimization"] = {{"stage", 4}};
  EXPECT_HAS(error_of([&] { validate(c); }), "'zero_optimization.stage' must be an integer from 0 to 3, got 4");
  c = mlp_cfg();
  c["optimizer"] = {{"params", {{"betas", {0.9}}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "'optimizer.params.betas' must be a pair [beta1, beta2]");
  c = mlp_cfg();
  c["model"]["sizes"] = {4};
  EXPECT_HAS(error_of([&] { validate(c); }), "'model.sizes' must be an array of at least two integers in [1, 2^24]");
  c = mlp_cfg();
  c.erase("model");
  EXPECT_HAS(error_of([&] { validate(c); }), "missing required config key 'model'");
  c = gpt_cfg();
  c["model"].erase("layers");
  EXPECT_HAS(error_of([&] { validate(c); }), "missing required config key 'model.layers'");
  c = mlp_cfg();
  c["data"] = {{"type", "text"}, {"path", "x.txt"}};
  EXPECT_HAS(error_of([&] { validate(c); }), "data.type 'text' yields token sequences");
  c = gpt_cfg();
  c["data"] = {{"type", "tokens"}};
  EXPECT_HAS(error_of([&] { validate(c); }), "missing required config key 'data.path'");
  c = gpt_cfg();
  c["parallel"] = "manual";
  EXPECT_HAS(error_of([&] { validate(c); }), "'parallel' must be \"auto\" or an object");
  c["parallel"] = {{"stages", {{0, 1}, {3, 2}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "'parallel.stages' must be an array of [first, last]");
  c["parallel"] = {{"stages", {{0, 1}, {2, 3}}}, {"schedule", "1F1B"}, {"activation_checkpointing", true}};
  EXPECT_EQ(validate(c)["parallel"]["schedule"], "1f1b");
  c["parallel"] = "auto";
  EXPECT_TRUE(parse(validate(c), 1).parallel.planned);
}

// parallel.context_attention: "auto" unless given, "heads" or "ring" as written, and anything else refused with the
// names it takes.
TEST(Config, ContextAttentionTakesItsThreeNames) {
  Json c = gpt_cfg();
  EXPECT_EQ(parse(validate(c), 1).parallel.context_attention, spec::ContextAttention::Auto);
  c["parallel"] = {{"context_attention", "heads"}};
  EXPECT_EQ(parse(validate(c), 1).parallel.context_attention, spec::ContextAttention::Heads);
  c["parallel"] = {{"context_attention", "ring"}};
  EXPECT_EQ(parse(validate(c), 1).parallel.context_attention, spec::ContextAttention::Ring);
  c["parallel"] = {{"context_attention", "ulysses"}};
  const std::string msg = error_of([&] { validate(c); });
  EXPECT_HAS(msg, "parallel.context_attention");
  EXPECT_HAS(msg, "ulysses");
  EXPECT_HAS(msg, "auto");
  EXPECT_HAS(msg, "heads");
  EXPECT_HAS(msg, "ring");
}

TEST(Config, Fp16AndBf16Conflict) {
  Json c = mlp_cfg();
  c["fp16"] = {{"enabled", true}};
  c["bf16"] = {{"enabled", true}};
  EXPECT_HAS(error_of([&] { validate(c); }), "fp16.enabled and bf16.enabled are both true");
}

TEST(Config, Fp8IsTypedAndRefusesWhatItCannotDo) {
  Json c = gpt_cfg();
  EXPECT_FALSE(parse(validate(c)).fp8.enabled);
  c["bf16"] = {{"enabled", true}};
  c["fp8"] = {{"enabled", true}, {"min_features", 64}};
  const TrainConfig t = parse(validate(c));
  EXPECT_TRUE(t.fp8.enabled);
  EXPECT_EQ(t.fp8.recipe, spec::Fp8Recipe::Tensorwise);
  EXPECT_EQ(t.fp8.min_features, 64);
  EXPECT_EQ(t.fp8.gradients, DType::E5M2);
  c["fp8"]["gradient_format"] = "e4m3";
  EXPECT_EQ(parse(validate(c)).fp8.gradients, DType::E4M3);
  c["fp8"]["gradient_format"] = "bf16";
  EXPECT_HAS(error_of([&] { validate(c); }), "fp8.gradient_format");
  c["fp8"].erase("gradient_format");
  c["fp8"]["recipe"] = "rowwise";
  EXPECT_EQ(parse(validate(c)).fp8.recipe, spec::Fp8Recipe::Rowwise);
  EXPECT_EQ(parse(validate(c)).fp8.gradients, DType::E5M2);
  // Blockwise keeps the gradients in e4m3 unless told otherwise, as DeepSeek-V3 and Transformer Engine do.
  c["fp8"]["recipe"] = "blockwise";
  EXPECT_EQ(parse(validate(c)).fp8.recipe, spec::Fp8Recipe::Blockwise);
  EXPECT_EQ(parse(validate(c)).fp8.gradients, DType::E4M3);
  c["fp8"]["gradient_format"] = "e5m2";
  EXPECT_EQ(parse(validate(c)).fp8.gradients, DType::E5M2);
  c["fp8"].erase("gradient_format");
  c["fp8"]["recipe"] = "Tensorwise";  // case-insensitive, as every choice
  EXPECT_NO_THROW(validate(c));
  c["fp8"]["recipe"] = "delayed";
  EXPECT_HAS(error_of([&] { validate(c); }), "fp8.recipe");
  c["fp8"] = {{"enabled", true}, {"amax_history_len", 16}};
  EXPECT_HAS(error_of([&] { validate(c); }), "fp8.amax_history_len");
  c["fp8"] = {{"enabled", true}};
  c["bf16"] = {{"enabled", false}};
  c["fp16"] = {{"enabled", true}};
  EXPECT_HAS(error_of([&] { validate(c); }), "fp8 with fp16.enabled");
  Json m = mlp_cfg();
  m["fp8"] = {{"enabled", true}};
  EXPECT_HAS(error_of([&] { validate(m); }), "which model type 'mlp' does not have");
  m["fp8"] = {{"enabled", false}};  // asked for nothing: fine on any model
  EXPECT_NO_THROW(validate(m));
}

TEST(Config, GptModelIsTyped) {
  Json c = gpt_cfg();
  GptConfig g = std::get<GptConfig>(parse(validate(c)).model);
  EXPECT_EQ(g.vocab_size, 256);
  EXPECT_EQ(g.seq_len, 16);
  EXPECT_EQ(g.dim, 32);
  EXPECT_EQ(g.layers, 2);
  EXPECT_EQ(g.heads, 4);
  EXPECT_FALSE(g.tie_word_embeddings);
  c["model"]["tie_word_embeddings"] = true;
  g = std::get<GptConfig>(parse(validate(c)).model);
  EXPECT_TRUE(g.tie_word_embeddings);
  EXPECT_EQ(model_type(GptConfig{}), "gpt");
}

TEST(Config, DataIsTyped) {
  Json c = gpt_cfg();
  DataConfig d = parse(validate(c)).data;
  EXPECT_EQ(d.type, DataType::Synthetic);
  EXPECT_EQ(d.samples, 65536);
  c["data"] = {{"type", "tokens"}, {"path", "train.bin"}, {"dtype", "uint32"}};
  d = parse(validate(c)).data;
  EXPECT_EQ(d.type, DataType::Tokens);
  EXPECT_EQ(d.path, "train.bin");
  EXPECT_EQ(d.token_bytes, 4);
  c["data"] = {{"type", "text"}, {"path", "corpus.txt"}};
  d = parse(validate(c)).data;
  EXPECT_EQ(d.type, DataType::Text);
  EXPECT_EQ(d.path, "corpus.txt");
}

TEST(Config, DimNotDivisibleByHeads) {
  Json c = gpt_cfg();
  c["model"]["dim"] = 30;
  const std::string msg = error_of([&] { validate(c); });
  EXPECT_HAS(msg, "model.dim (30) is not divisible by model.heads (4)");
  EXPECT_HAS(msg, "divisor of 30 (e.g. 3)");
  EXPECT_HAS(msg, "multiple of 4 (e.g. 32)");
}

TEST(Config, DeviceMemory) {
  Json c = mlp_cfg();
  c["device_memory"] = "512MiB";
  EXPECT_EQ(parse(validate(c), 1).device_memory_bytes, 512ull << 20);
  c["device_memory"] = 1048576;
  EXPECT_EQ(parse(validate(c), 1).device_memory_bytes, 1048576u);
  c["device_memory"] = "1.5GB";
  EXPECT_EQ(parse(validate(c), 1).device_memory_bytes, 1500000000u);
  c["device_memory"] = "12 parsecs";
  EXPECT_HAS(error_of([&] { validate(c); }), "config key 'device_memory': unknown unit in size '12 parsecs'");
  c["device_memory"] = -5;
  EXPECT_HAS(error_of([&] { validate(c); }), "'device_memory' must be a size");
  c["device_memory"] = true;
  EXPECT_HAS(error_of([&] { validate(c); }), "'device_memory' must be a size");
}

// Tandem's own keys of offload_optimizer: when the host update may start, and the pieces the updated values go up in.
// Like ratio they are checked and written back with or without a device (changing nothing without one), and they are
// not DeepSpeed keys of no effect.
TEST(Config, TilesDefaultToTheRulesAndTakeCountsOfTokens) {
  Json c = gpt_cfg();
  const Json v = validate(c);
  EXPECT_EQ(v["tiles"]["loss_tokens"], 0);
  EXPECT_EQ(v["tiles"]["mlp_tokens"], 0);
  EXPECT_EQ(validate(v), v);
  TrainConfig tc = parse(v, 1);
  EXPECT_EQ(tc.tiles.loss_tokens, 0);
  EXPECT_EQ(tc.tiles.mlp_tokens, 0);
  c["tiles"] = {{"loss_tokens", 4096}, {"mlp_tokens", 8192}};
  tc = parse(validate(c), 1);
  EXPECT_EQ(tc.tiles.loss_tokens, 4096);
  EXPECT_EQ(tc.tiles.mlp_tokens, 8192);
  for (const char* key : {"loss_tokens", "mlp_tokens"})
    for (const Json& bad : {Json(-1), Json(2.5), Json("4k")}) {
      Json d = c;
      d["tiles"][key] = bad;
      EXPECT_HAS(error_of([&] { validate(d); }), std::string("config key 'tiles.") + key + "' must be");
    }
  c["tiles"] = {{"attention_tokens", 1}};
  EXPECT_HAS(error_of([&] { validate(c); }), "tiles.attention_tokens");
}

// tiles.attention_block_bytes: 0 by default (the preflight's choice), else a size or a byte count.
TEST(Config, AttentionBlockBytesTakeASize) {
  Json c = gpt_cfg();
  EXPECT_EQ(validate(c)["tiles"]["attention_block_bytes"], 0);
  EXPECT_EQ(parse(validate(c), 1).tiles.attention_block_bytes, 0);
  c["tiles"] = {{"attention_block_bytes", "8GiB"}};
  const Json v = validate(c);
  EXPECT_EQ(validate(v), v);
  EXPECT_EQ(parse(v, 1).tiles.attention_block_bytes, int64_t{8} << 30);
  c["tiles"] = {{"attention_block_bytes", 1 << 20}};
  EXPECT_EQ(parse(validate(c), 1).tiles.attention_block_bytes, 1 << 20);
  for (const Json& bad : {Json(-1), Json(true), Json("8 lemons")}) {
    c["tiles"] = {{"attention_block_bytes", bad}};
    EXPECT_HAS(error_of([&] { validate(c); }), "config key 'tiles.attention_block_bytes'");
  }
}

TEST(Config, OffloadUpdateAndUploadPiece) {
  Json c = gpt_cfg();
  c["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}};
  const Json v = validate(c);
  EXPECT_EQ(v["zero_optimization"]["offload_optimizer"]["update"], "in_backward");
  EXPECT_EQ(v["zero_optimization"]["offload_optimizer"]["upload_piece"], int64_t{64} << 20);
  EXPECT_EQ(validate(v), v);
  TrainConfig tc = parse(v, 1);
  EXPECT_EQ(tc.offload_optimizer.update, OffloadUpdate::InBackward);
  EXPECT_EQ(tc.offload_optimizer.upload_piece, int64_t{64} << 20);
  Json& o = c["zero_optimization"]["offload_optimizer"];
  o["update"] = "after_backward";
  o["upload_piece"] = 1000;
  tc = parse(validate(c), 1);
  EXPECT_EQ(tc.offload_optimizer.update, OffloadUpdate::AfterBackward);
  EXPECT_EQ(tc.offload_optimizer.upload_piece, 1000);
  EXPECT_TRUE(tc.no_effect_keys.empty());
  o["update"] = "in_backward";
  EXPECT_EQ(parse(validate(c), 1).offload_optimizer.update, OffloadUpdate::InBackward);
  const std::string update =
      "config key 'zero_optimization.offload_optimizer.update' must be one of \"in_backward\", "
      "\"after_backward\", got ";
  o["update"] = "sometimes";
  EXPECT_HAS(error_of([&] { validate(c); }), update + "\"sometimes\"");
  o["update"] = true;
  EXPECT_HAS(error_of([&] { validate(c); }), update + "true");
  o["update"] = "after_backward";
  const std::string piece = "config key 'zero_optimization.offload_optimizer.upload_piece' must be a positive integer";
  for (const Json& bad : {Json(0), Json(-4096), Json(2.5), Json("64Mi")}) {
    o["upload_piece"] = bad;
    EXPECT_HAS(error_of([&] { validate(c); }), piece + ", got " + bad.dump());
  }
  // Without a device: checked all the same, and of no effect.
  c["zero_optimization"] = {{"stage", 1}, {"offload_optimizer", {{"update", "after_backward"}, {"upload_piece", 8}}}};
  tc = parse(validate(c), 1);
  EXPECT_FALSE(tc.offload_optimizer.enabled());
  EXPECT_TRUE(tc.no_effect_keys.empty());
  c["zero_optimization"]["offload_optimizer"]["update"] = "never";
  EXPECT_HAS(error_of([&] { validate(c); }), update + "\"never\"");
  // offload_param has neither; --set reaches them as any key.
  c["zero_optimization"] = {{"stage", 3}, {"offload_param", {{"update", "after_backward"}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'zero_optimization.offload_param.update'");
  c = gpt_cfg();
  apply_override(c, "zero_optimization.offload_optimizer.update=after_backward");
  apply_override(c, "zero_optimization.offload_optimizer.upload_piece=4096");
  tc = parse(validate(c), 1);
  EXPECT_EQ(tc.offload_optimizer.update, OffloadUpdate::AfterBackward);
  EXPECT_EQ(tc.offload_optimizer.upload_piece, 4096);
}

TEST(Batch, DerivesEachOfTheThree) {
  BatchSizes b = resolve_batch(Json{{"train_batch_size", 32}, {"train_micro_batch_size_per_gpu", 4}}, 2);
  EXPECT_EQ(b.accum, 4);
  b = resolve_batch(Json{{"train_batch_size", 32}, {"gradient_accumulation_steps", 2}}, 2);
  EXPECT_EQ(b.micro, 8);
  b = resolve_batch(Json{{"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 3}}, 2);
  EXPECT_EQ(b.global, 24);
  b = resolve_batch(Json{{"train_batch_size", 32}}, 4);
  EXPECT_EQ(b.micro, 8);
  EXPECT_EQ(b.accum, 1);
  b = resolve_batch(Json{{"train_micro_batch_size_per_gpu", 5}}, 3);
  EXPECT_EQ(b.global, 15);
  EXPECT_EQ(b.accum, 1);
  b = resolve_batch(
      Json{{"train_batch_size", 24}, {"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 3}}, 2);
  EXPECT_EQ(b.global, 24);
}

TEST(Batch, Errors) {
  std::string msg = error_of([] {
    resolve_batch(
        Json{{"train_batch_size", 32}, {"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 3}}, 2);
  });
  EXPECT_HAS(msg, "train_batch_size (32) must equal");
  EXPECT_HAS(msg, "= 4 * 3 * 2 = 24");
  EXPECT_HAS(msg, "Change train_batch_size to 24");

  msg = error_of([] { resolve_batch(Json{{"train_batch_size", 30}, {"train_micro_batch_size_per_gpu", 4}}, 2); });
  EXPECT_HAS(
      msg, "train_batch_size = 30 is not divisible by train_micro_batch_size_per_gpu * data-parallel size = 4 * 2 = 8");
  EXPECT_HAS(msg, "(e.g. 24 or 32)");
  msg = error_of([] { resolve_batch(Json{{"train_batch_size", 3}, {"gradient_accumulation_steps", 2}}, 2); });
  EXPECT_HAS(msg, "gradient_accumulation_steps * data-parallel size = 2 * 2 = 4");
  EXPECT_HAS(msg, "(e.g. 4)");
  EXPECT_HAS(error_of([] {
               resolve_batch(Json{{"train_batch_size", 6}}, 4);
             }),
             "train_batch_size = 6 is not divisible by the data-parallel size = 4, so train_micro_batch_size_per_gpu");
  EXPECT_HAS(error_of([] { resolve_batch(Json::object(), 1); }), "no batch size given");
  EXPECT_HAS(error_of([] {
               resolve_batch(Json{{"gradient_accumulation_steps", 2}}, 1);
             }),
             "only gradient_accumulation_steps (2) is set");
  EXPECT_HAS(error_of([] {
               resolve_batch(Json{{"train_batch_size", 0}}, 1);
             }),
             "config key 'train_batch_size' must be a positive integer, got 0");
  EXPECT_HAS(error_of([] {
               resolve_batch(Json{{"train_micro_batch_size_per_gpu", int64_t{1} << 31}}, 1);
             }),
             "'train_micro_batch_size_per_gpu' must be a positive integer of at most 2147483647, got 2147483648");
}

TEST(Config, DocumentMaskNeedsTheEndOfDocumentToken) {
  Json cfg = gpt_cfg();
  cfg["data"] = {{"type", "synthetic"}, {"document_mask", true}, {"eos_token_id", 0}};
  const TrainConfig tc = parse(validate(cfg));
  EXPECT_TRUE(tc.data.document_mask);
  EXPECT_EQ(tc.data.eos_token_id, 0);
  EXPECT_FALSE(parse(validate(gpt_cfg())).data.document_mask);
  cfg["data"].erase("eos_token_id");
  EXPECT_HAS(error_of([&] { validate(cfg); }), "'data.eos_token_id' beside data.document_mask");
  cfg["data"] = {{"type", "synthetic"}, {"eos_token_id", 2}};
  EXPECT_HAS(error_of([&] { validate(cfg); }), "has no effect without data.document_mask");
}

}  // namespace
}  // namespace tandem::config
