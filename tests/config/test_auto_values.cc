// "auto" values as configs written for the Hugging Face Trainer carry them: what each becomes, the line that
// says so, idempotent validation, and "auto" refused where the Trainer does not fill it.
#include <gtest/gtest.h>

#include "tandem/config/config.h"
#include "test_util.h"

namespace tandem::config {
namespace {

using tandem::testing::error_of;

Json with_model(Json c) {
  c["model"] = {{"type", "mlp"}, {"sizes", {4, 8, 3}}};
  return c;
}

// The Trainer's typical ZeRO-2 config: every key it fills is "auto".
Json hf_cfg() {
  return with_model(Json::parse(R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                     "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 2, "overlap_comm": true, "contiguous_gradients": true,
                          "reduce_bucket_size": "auto"}})"));
}

TEST(AutoValues, TrainerConfigResolves) {
  const Json v = validate(hf_cfg());
  EXPECT_EQ(validate(v), v) << "validate must stay idempotent";
  const TrainConfig tc = parse(v, 2);
  // All three batch keys "auto": the Trainer's per-device batch of 8, no accumulation.
  EXPECT_EQ(tc.batch.micro, 8);
  EXPECT_EQ(tc.batch.accum, 1);
  EXPECT_EQ(tc.batch.global, 16);
  EXPECT_DOUBLE_EQ(tc.gradient_clipping, 1.0);
  EXPECT_DOUBLE_EQ(tc.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(tc.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(tc.optimizer.beta2, 0.999);
  EXPECT_DOUBLE_EQ(tc.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(tc.optimizer.weight_decay, 0.0);
  EXPECT_EQ(tc.scheduler.type, SchedulerType::WarmupDecayLR);
  EXPECT_DOUBLE_EQ(tc.scheduler.warmup_min_lr, 0.0);
  EXPECT_EQ(tc.scheduler.warmup_num_steps, 0);
  EXPECT_EQ(tc.scheduler.total_num_steps, tc.steps);
  EXPECT_DOUBLE_EQ(tc.scheduler.peak_lr, tc.optimizer.lr);
  EXPECT_FALSE(tc.fp16.enabled);
  EXPECT_FALSE(tc.bf16);
  EXPECT_FALSE(tc.raw.contains("auto_resolved")) << "the record stays out of the saved config";
  ASSERT_EQ(tc.notices.size(), 2u);
  EXPECT_EQ(tc.notices[0],
            "\"auto\" values (as the Hugging Face Trainer fills them, docs/deepspeed.md): train_batch_size -> 16 "
            "(derived), train_micro_batch_size_per_gpu -> 8 (the Trainer's per_device_train_batch_size default), "
            "gradient_accumulation_steps -> 1 (derived), gradient_clipping -> 1.0 (the Trainer's max_grad_norm "
            "default), optimizer.params.lr -> 0.001 (as if absent), optimizer.params.betas -> [0.9,0.999] (as if "
            "absent), optimizer.params.eps -> 1e-08 (as if absent), optimizer.params.weight_decay -> 0.0 (as if "
            "absent), scheduler.params.warmup_min_lr -> 0.0 (what the Trainer writes), "
            "scheduler.params.warmup_max_lr -> optimizer.params.lr (0.001), scheduler.params.warmup_num_steps -> 0 "
            "(the Trainer's warmup_steps default), scheduler.params.total_num_steps -> 100 (as if absent), "
            "fp16.enabled -> false (the Trainer's fp16 default), bf16.enabled -> false (the Trainer's bf16 "
            "default), zero_optimization.reduce_bucket_size -> no effect");
  EXPECT_EQ(tc.notices[1],
            "warning: these DeepSpeed keys have no effect in Tandem: zero_optimization.overlap_comm, "
            "zero_optimization.reduce_bucket_size (docs/deepspeed.md)");
}

TEST(AutoValues, BatchKeysAreDerivedLikeAbsentOnes) {
  Json c = with_model(
      {{"train_batch_size", 32}, {"train_micro_batch_size_per_gpu", "auto"}, {"gradient_accumulation_steps", "auto"}});
  BatchSizes b = parse(validate(c), 4).batch;
  EXPECT_EQ(b.micro, 8);  // 32 / 4 ranks, without accumulation
  EXPECT_EQ(b.accum, 1);
  c = with_model(
      {{"train_batch_size", "auto"}, {"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 2}});
  b = parse(validate(c), 3).batch;
  EXPECT_EQ(b.global, 24);
  c = with_model(
      {{"train_batch_size", "auto"}, {"train_micro_batch_size_per_gpu", "auto"}, {"gradient_accumulation_steps", 4}});
  b = parse(validate(c), 2).batch;  // nothing else gives the batch: the Trainer's 8 per device
  EXPECT_EQ(b.micro, 8);
  EXPECT_EQ(b.accum, 4);
  EXPECT_EQ(b.global, 64);
  c = with_model({{"train_batch_size", "auto"}, {"train_micro_batch_size_per_gpu", 6}});
  const TrainConfig tc = parse(validate(c), 2);
  EXPECT_EQ(tc.batch.global, 12);
  ASSERT_EQ(tc.notices.size(), 1u);
  EXPECT_HAS(tc.notices[0], ": train_batch_size -> 12 (derived)");
}

TEST(AutoValues, OptimizerLrFollowsAGivenPeak) {
  Json c = with_model({{"train_batch_size", 8}});
  c["optimizer"] = {{"params", {{"lr", "auto"}}}};
  c["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 3e-4}, {"warmup_num_steps", "auto"}}}};
  const TrainConfig tc = parse(validate(c), 1);
  EXPECT_DOUBLE_EQ(tc.optimizer.lr, 3e-4);  // as if absent: the schedule's peak
  EXPECT_DOUBLE_EQ(tc.scheduler.peak_lr, 3e-4);
  EXPECT_EQ(tc.scheduler.warmup_num_steps, 0);
  ASSERT_EQ(tc.notices.size(), 1u) << "no warning that the optimizer's lr is unused: it is the peak";
  EXPECT_HAS(tc.notices[0], "optimizer.params.lr -> 0.0003 (as if absent)");
}

TEST(AutoValues, WarmupLrEndsWithoutATotal) {
  Json c = with_model({{"train_batch_size", 8}});
  c["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"total_num_steps", "auto"}, {"warmup_num_steps", 3}}}};
  const TrainConfig tc = parse(validate(c), 1);
  EXPECT_FALSE(tc.raw["scheduler"]["params"].contains("total_num_steps"));
  EXPECT_HAS(tc.notices.at(0), "scheduler.params.total_num_steps -> unused by this scheduler");
  c["scheduler"] = {{"type", "WarmupCosineLR"}, {"params", {{"warmup_max_lr", "auto"}, {"warmup_num_steps", 3}}}};
  EXPECT_HAS(parse(validate(c), 1).notices.at(0), "scheduler.params.warmup_max_lr -> unused by this scheduler");
}

TEST(AutoValues, NoEffectKeysMayStayAuto) {
  Json c = with_model({{"train_batch_size", 8}});
  c["zero_optimization"] = {
      {"stage", 3}, {"stage3_prefetch_bucket_size", "auto"}, {"stage3_param_persistence_threshold", "auto"}};
  c["amp"] = {{"enabled", "auto"}, {"opt_level", "auto"}};
  const TrainConfig tc = parse(validate(c), 1);
  EXPECT_EQ(tc.raw["zero_optimization"]["stage3_prefetch_bucket_size"], "auto");
  EXPECT_EQ(tc.raw["amp"]["enabled"], false);
  EXPECT_HAS(tc.notices.at(0), "amp.enabled -> false (the Trainer's fp16 default), amp.opt_level -> no effect");
  EXPECT_HAS(tc.notices.at(0), "zero_optimization.stage3_param_persistence_threshold -> no effect");
  EXPECT_HAS(tc.notices.at(1), ": amp.opt_level, zero_optimization.stage3_param_persistence_threshold");
}

TEST(AutoValues, AutoElsewhereIsRefusedNamingTheKey) {
  Json c = with_model({{"train_batch_size", 8}});
  c["zero_optimization"] = {{"overlap_comm", "auto"}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "config key 'zero_optimization.overlap_comm' is \"auto\": Tandem resolves \"auto\" only at the keys "
             "the Hugging Face Trainer fills");
  c = with_model({{"train_batch_size", 8}});
  c["tensorboard"] = {{"enabled", true}, {"job_name", "auto"}};
  EXPECT_HAS(error_of([&] { validate(c); }), "config key 'tensorboard.job_name' is \"auto\"");
  c = with_model({{"train_batch_size", 8}, {"steps", "auto"}});
  EXPECT_HAS(error_of([&] { validate(c); }), "config key 'steps' must be a positive integer, got \"auto\"");
  c = with_model({{"train_batch_size", 8}});
  c["fp16"] = {{"enabled", true}, {"loss_scale", "auto"}};
  EXPECT_HAS(error_of([&] { validate(c); }), "config key 'fp16.loss_scale' must be a number");
  // Tandem's own "auto" is untouched.
  c = with_model({{"train_batch_size", 8}, {"parallel", "auto"}});
  EXPECT_EQ(validate(c)["parallel"], "auto");
  EXPECT_TRUE(parse(validate(c), 1).notices.empty());
}

TEST(AutoValues, TheRecordIsTandems) {
  Json c = with_model({{"train_batch_size", 8}, {"auto_resolved", {"steps"}}});
  EXPECT_HAS(error_of([&] { validate(c); }),
             "config key 'auto_resolved' is [\"steps\"]: Tandem writes it (the keys whose \"auto\" it resolved); "
             "remove it");
  c = with_model({{"train_micro_batch_size_per_gpu", "auto"}, {"auto_resolved", 5}});
  EXPECT_HAS(error_of([&] { validate(c); }), "config key 'auto_resolved' is 5: Tandem writes it");
  c = with_model({{"train_batch_size", 8}, {"gradient_clipping", "auto"}});
  const Json v = validate(c);
  EXPECT_EQ(v["auto_resolved"], Json::array({"gradient_clipping"}));
  EXPECT_EQ(v["gradient_clipping"], 1.0);
}

}  // namespace
}  // namespace tandem::config
