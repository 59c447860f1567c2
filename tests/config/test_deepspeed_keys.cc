// DeepSpeed's keys in a config: the tutorial config validates into the expected TrainConfig, every catalogued
// key is judged as the catalogue says (refused ones with their message, no-effect ones listed once), misspelt
// DeepSpeed keys get the nearest one, and docs/deepspeed.md lists every catalogued key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "config_test_util.h"
#include "tandem/config/config.h"
#include "tandem/config/deepspeed_keys.h"
#include "test_util.h"

namespace tandem::config {
namespace {

using tandem::testing::error_of;

Json gpt_model() {
  return Json::parse(R"({"type": "gpt", "vocab_size": 256, "seq_len": 16, "dim": 32, "layers": 2, "heads": 4})");
}

// DeepSpeed's getting-started config, with a model and data added.
Json tutorial_cfg() {
  Json c = Json::parse(R"({
    "train_batch_size": 32,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "Adam", "params": {"lr": 0.00015}},
    "fp16": {"enabled": true},
    "zero_optimization": {"stage": 2, "allgather_partitions": true, "allgather_bucket_size": 5e8,
                          "overlap_comm": true, "reduce_scatter": true, "reduce_bucket_size": 5e8,
                          "contiguous_gradients": true}})");
  c["model"] = gpt_model();
  c["data"] = {{"type", "synthetic"}};
  return c;
}

// Sets the value at dotted `path`, creating objects on the way.
void set(Json& cfg, const std::string& path, Json value) {
  Json* node = &cfg;
  size_t begin = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; begin = dot + 1, dot = path.find('.', begin)) {
    Json& next = (*node)[path.substr(begin, dot - begin)];
    if (!next.is_object()) next = Json::object();
    node = &next;
  }
  (*node)[path.substr(begin)] = std::move(value);
}

// A base config in which every catalogued key may be set: a warmup schedule (its params take
// last_batch_iteration) and a gpt model.
Json base_cfg() {
  Json c = {{"train_batch_size", 8}, {"model", gpt_model()}};
  c["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 2}}}};
  return c;
}

// The keys the generic tests set: leaves only (not "a.*", not objects judged key by key), not the schema's.
std::vector<const DeepSpeedKey*> leaves() {
  std::vector<const DeepSpeedKey*> out;
  const auto& all = deepspeed_keys();
  for (const DeepSpeedKey& k : all) {
    if (k.schema || k.path.find('*') != std::string::npos) continue;
    const bool has_children = std::any_of(all.begin(), all.end(), [&](const DeepSpeedKey& o) {
      return o.path.size() > k.path.size() && o.path.compare(0, k.path.size() + 1, k.path + ".") == 0;
    });
    if (!has_children || k.open) out.push_back(&k);
  }
  return out;
}

// A value the entry judges as `want`, if it has one.
std::optional<Json> value_judged(const DeepSpeedKey& k, DsCategory want) {
  for (const auto& [v, c] : k.values)
    if (c == want) return v;
  if (k.category != want) return std::nullopt;
  if (k.open) return Json::object();
  // Any value the entry does not list: the opposite of a listed boolean, else a number it does not list.
  for (const auto& [v, c] : k.values)
    if (v.is_boolean()) return Json(!v.get<bool>());
  for (const auto& [v, c] : k.values)
    if (v.is_string()) return Json("not-" + v.get<std::string>());
  return Json(7);
}

TEST(DeepSpeedKeys, TutorialConfigValidates) {
  const TrainConfig tc = parse(validate(tutorial_cfg()), 2);
  EXPECT_EQ(tc.zero_stage, 2);
  EXPECT_TRUE(tc.fp16.enabled);
  EXPECT_FALSE(tc.bf16);
  EXPECT_EQ(tc.optimizer.type, OptimizerType::Adam);
  EXPECT_TRUE(tc.optimizer.adam_w_mode);
  EXPECT_DOUBLE_EQ(tc.optimizer.lr, 0.00015);
  EXPECT_DOUBLE_EQ(tc.optimizer.weight_decay, 0.0);
  EXPECT_EQ(tc.batch.global, 32);
  EXPECT_EQ(tc.batch.micro, 16);
  EXPECT_EQ(tc.batch.accum, 1);
  const std::vector<std::string> no_effect = {"zero_optimization.allgather_bucket_size",
                                              "zero_optimization.overlap_comm", "zero_optimization.reduce_bucket_size"};
  EXPECT_EQ(tc.no_effect_keys, no_effect);
  ASSERT_EQ(tc.notices.size(), 1u);
  EXPECT_EQ(tc.notices[0],
            "warning: these DeepSpeed keys have no effect in Tandem: zero_optimization.allgather_bucket_size, "
            "zero_optimization.overlap_comm, zero_optimization.reduce_bucket_size (docs/deepspeed.md)");
  // The DeepSpeed keys stay in the config (for the checkpoint manifest) and validation stays idempotent.
  EXPECT_EQ(tc.raw["zero_optimization"]["overlap_comm"], true);
  EXPECT_EQ(validate(tc.raw), tc.raw);

  Json c = tutorial_cfg();
  c["optimizer"]["params"]["weight_decay"] = 0.01;  // Adam keeps the decay as written
  EXPECT_DOUBLE_EQ(parse(validate(c), 2).optimizer.weight_decay, 0.01);
}

TEST(DeepSpeedKeys, TutorialConfigFromAFile) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("tandem_ds_tutorial_" + std::to_string(std::random_device{}()) + ".json");
  std::ofstream(file) << tutorial_cfg().dump(2);
  const TrainConfig tc = parse(load_config(file.string(), {}), 1);
  std::filesystem::remove(file);
  EXPECT_EQ(tc.no_effect_keys.size(), 3u);
  EXPECT_EQ(tc.batch.micro, 32);
}

TEST(DeepSpeedKeys, EveryRefusedValueIsRefusedWithItsMessage) {
  int count = 0;
  for (const DeepSpeedKey* k : leaves()) {
    const std::optional<Json> v = value_judged(*k, DsCategory::kRefused);
    if (!v) continue;
    ++count;
    Json c = base_cfg();
    set(c, k->path, *v);
    const std::string msg = error_of([&] { validate(c); });
    EXPECT_HAS(msg, k->path + " " + v->dump() + ": " + k->refusal);
    EXPECT_FALSE(k->refusal.empty()) << k->path;
  }
  EXPECT_GT(count, 30);
}

TEST(DeepSpeedKeys, EveryNoEffectValueIsListedOnce) {
  int count = 0;
  for (const DeepSpeedKey* k : leaves()) {
    const std::optional<Json> v = value_judged(*k, DsCategory::kNoEffect);
    if (!v) continue;
    ++count;
    Json c = base_cfg();
    set(c, k->path, *v);
    std::vector<std::string> listed;
    EXPECT_NO_THROW(listed = parse(validate(c), 1).no_effect_keys) << k->path;
    // The key itself, or the DeepSpeed object holding it when nothing else in that object has an effect.
    ASSERT_EQ(listed.size(), 1u) << k->path;
    EXPECT_EQ(k->path.compare(0, listed[0].size(), listed[0]), 0) << k->path << " listed as " << listed[0];
  }
  EXPECT_GT(count, 100);
}

TEST(DeepSpeedKeys, HonouredValuesAreNotListed) {
  int count = 0;
  for (const DeepSpeedKey* k : leaves()) {
    const std::optional<Json> v = value_judged(*k, DsCategory::kHonoured);
    if (!v) continue;
    ++count;
    Json c = base_cfg();
    set(c, k->path, *v);
    EXPECT_TRUE(parse(validate(c), 1).no_effect_keys.empty()) << k->path;
  }
  EXPECT_GE(count, 10);
}

TEST(DeepSpeedKeys, RefusalsSayWhatToDo) {
  Json c = base_cfg();
  c["zero_optimization"] = {{"stage", 3}, {"zero_quantized_weights", true}};
  EXPECT_HAS(error_of([&] { validate(c); }), "zero_optimization.zero_quantized_weights true: Tandem does not quantize");
  c = base_cfg();
  c["compression_training"] = {{"weight_quantization", {{"shared_parameters", {{"enabled", true}}}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "compression_training {");
  EXPECT_HAS(error_of([&] { validate(c); }), "Tandem does not compress models");
  c = base_cfg();
  c["sparse_attention"] = {{"mode", "fixed"}};
  EXPECT_HAS(error_of([&] { validate(c); }), "does not do block-sparse attention yet");
  c = base_cfg();
  c["amp"] = {{"enabled", true}, {"opt_level", "O1"}};
  EXPECT_HAS(error_of([&] { validate(c); }), "amp.enabled true: Tandem does not use Apex AMP; set \"bf16\"");
  c = base_cfg();
  c["communication_data_type"] = "fp16";
  EXPECT_HAS(
      error_of([&] { validate(c); }),
      "communication_data_type \"fp16\": Tandem reduces gradients in fp32 only; remove it or set it to \"fp32\"");
  c["communication_data_type"] = "fp32";  // what Tandem does: honoured, not listed
  EXPECT_TRUE(parse(validate(c), 1).no_effect_keys.empty());
  c = base_cfg();
  c["optimizer"] = {{"type", "Lamb"}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "optimizer.type \"Lamb\": Tandem does not implement DeepSpeed's Lamb yet; use \"Adam\" or \"AdamW\"");
  c = base_cfg();
  c["scheduler"] = {{"type", "onecycle"}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "scheduler.type \"onecycle\": Tandem does not implement DeepSpeed's "
             "OneCycle yet");
  c["scheduler"] = {{"type", "LRRangeTest"}};
  EXPECT_HAS(error_of([&] { validate(c); }), "DeepSpeed's LRRangeTest yet");
}

// ZeRO-Offload's and ZeRO-Infinity's keys as DeepSpeed's documentation writes them, the older cpu_offload spelling,
// and what DeepSpeed itself refuses (offloading the optimizer at stage 0, the parameters below stage 3).
TEST(DeepSpeedKeys, OffloadKeysAsWritten) {
  Json c = base_cfg();
  c["zero_optimization"] = {
      {"stage", 3},
      {"offload_optimizer",
       {{"device", "nvme"}, {"nvme_path", "/local_nvme"}, {"pin_memory", true}, {"buffer_count", 5}, {"ratio", 0.5}}},
      {"offload_param", {{"device", "cpu"}, {"pin_memory", true}, {"buffer_size", 1e8}, {"max_in_cpu", 1e9}}}};
  TrainConfig tc = parse(validate(c), 1);
  EXPECT_EQ(tc.offload_optimizer.device, OffloadDevice::Nvme);
  EXPECT_EQ(tc.offload_optimizer.nvme_path, "/local_nvme");
  EXPECT_TRUE(tc.offload_optimizer.pin_memory);
  EXPECT_EQ(tc.offload_optimizer.buffer_count, 5);
  EXPECT_EQ(tc.offload_optimizer.ratio, 0.5);
  EXPECT_EQ(tc.offload_param.device, OffloadDevice::Cpu);
  const std::vector<std::string> tuning = {"zero_optimization.offload_param.buffer_size",
                                           "zero_optimization.offload_param.max_in_cpu"};
  EXPECT_EQ(tc.no_effect_keys, tuning);
  // Defaults: nothing offloaded, pageable buffers, DeepSpeed's buffer_count.
  tc = parse(validate(base_cfg()), 1);
  EXPECT_FALSE(tc.offload_optimizer.enabled());
  EXPECT_FALSE(tc.offload_param.enabled());
  EXPECT_FALSE(tc.offload_optimizer.pin_memory);
  EXPECT_EQ(tc.offload_optimizer.buffer_count, 4);
  // The older spelling.
  c["zero_optimization"] = {{"stage", 2}, {"cpu_offload", true}, {"cpu_offload_use_pin_memory", true}};
  tc = parse(validate(c), 1);
  EXPECT_EQ(tc.offload_optimizer.device, OffloadDevice::Cpu);
  EXPECT_TRUE(tc.offload_optimizer.pin_memory);
  EXPECT_FALSE(tc.offload_param.enabled());
  EXPECT_TRUE(tc.no_effect_keys.empty());
  // Refusals, each saying what to change.
  c["zero_optimization"] = {{"stage", 0}, {"offload_optimizer", {{"device", "cpu"}}}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "zero_optimization.offload_optimizer needs ZeRO stage 1, 2 or 3, as in DeepSpeed");
  c["zero_optimization"] = {
      {"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}, {"offload_param", {{"device", "cpu"}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "zero_optimization.offload_param needs ZeRO stage 3");
  c["zero_optimization"] = {{"stage", 3}, {"offload_param", {{"device", "cpu"}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "offload_param without offload_optimizer keeps the fp32 master");
  c["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "nvme"}}}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "missing required config key 'zero_optimization.offload_optimizer.nvme_path'");
  c["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "disk"}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "zero_optimization.offload_optimizer.device");
  c["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}, {"ratio", 0}}}};
  EXPECT_HAS(error_of([&] { validate(c); }), "zero_optimization.offload_optimizer.ratio");
}

TEST(DeepSpeedKeys, ObjectsOfNoEffectAreListedOnce) {
  Json c = base_cfg();
  c["wandb"] = {{"enabled", true}, {"project", "p"}, {"team", "x"}};
  c["zero_optimization"] = {{"round_robin_gradients", true}};
  c["wall_clock_breakdown"] = true;
  c["memory_breakdown"] = false;  // what Tandem does anyway: honoured, not listed
  c["checkpoint"] = {{"every", 10}, {"tag_validation", "Warn"}, {"parallel_write", {{"pipeline_stage", false}}}};
  const std::vector<std::string> want = {"checkpoint.parallel_write", "checkpoint.tag_validation",
                                         "wall_clock_breakdown", "wandb", "zero_optimization.round_robin_gradients"};
  const TrainConfig tc = parse(validate(c), 1);
  EXPECT_EQ(tc.no_effect_keys, want);
  EXPECT_EQ(tc.checkpoint.every, 10);  // Tandem's own checkpoint keys beside DeepSpeed's
  // An object whose keys are all honoured is not listed; in one with an honoured key, only the others are.
  c = base_cfg();
  c["data_types"] = {{"grad_accum_dtype", "fp32"}};
  c["activation_checkpointing"] = {{"partition_activations", false}, {"profile", true}};
  const std::vector<std::string> one = {"activation_checkpointing.profile"};
  EXPECT_EQ(parse(validate(c), 1).no_effect_keys, one);
}

// DeepSpeed's activation_checkpointing.cpu_checkpointing is Tandem's parallel.cpu_checkpointing: read as written,
// checked as a boolean, and refused where the two keys disagree.
TEST(DeepSpeedKeys, CpuCheckpointingKeepsTheInputsInHostMemory) {
  Json c = base_cfg();
  c["parallel"] = {{"activation_checkpointing", true}};
  c["activation_checkpointing"] = {{"cpu_checkpointing", true}};
  const TrainConfig tc = parse(validate(c), 1);
  EXPECT_TRUE(tc.parallel.cpu_checkpointing);
  EXPECT_TRUE(tc.no_effect_keys.empty());
  c["activation_checkpointing"]["cpu_checkpointing"] = false;
  EXPECT_FALSE(parse(validate(c), 1).parallel.cpu_checkpointing);
  c["activation_checkpointing"]["cpu_checkpointing"] = "yes";
  EXPECT_HAS(error_of([&] { validate(c); }), "activation_checkpointing.cpu_checkpointing");
  c["activation_checkpointing"]["cpu_checkpointing"] = true;
  c["parallel"]["cpu_checkpointing"] = false;
  EXPECT_HAS(error_of([&] { validate(c); }),
             "parallel.cpu_checkpointing false and DeepSpeed's activation_checkpointing.cpu_checkpointing true "
             "disagree: keep one of them");
  c["parallel"]["cpu_checkpointing"] = true;
  EXPECT_TRUE(parse(validate(c), 1).parallel.cpu_checkpointing);
}

// DeepSpeed's sequence_parallel_size (Ulysses) is Tandem's parallel.context: written there, 1 the same as left out,
// refused where the two disagree or where the layout is left to the planner.
TEST(DeepSpeedKeys, SequenceParallelSizeIsTheContextAxis) {
  Json c = base_cfg();
  c["sequence_parallel_size"] = 2;
  EXPECT_EQ(parse(validate(c), 1).parallel.context, 2);
  c["parallel"] = {{"tensor", 2}};
  const TrainConfig tc = parse(validate(c), 1);
  EXPECT_EQ(tc.parallel.context, 2);
  EXPECT_EQ(tc.parallel.tensor, 2);
  EXPECT_TRUE(tc.no_effect_keys.empty());
  c["sequence_parallel_size"] = 1;
  EXPECT_FALSE(parse(validate(c), 1).parallel.context.has_value());
  c["sequence_parallel_size"] = 2;
  c["parallel"]["context"] = 4;
  EXPECT_HAS(error_of([&] { validate(c); }),
             "sequence_parallel_size 2 and parallel.context 4 disagree: they are one setting (DeepSpeed's name and "
             "Tandem's); keep one");
  c["parallel"] = "auto";
  EXPECT_HAS(error_of([&] { validate(c); }), "the planner does not choose context parallelism yet");
  c.erase("parallel");
  c["sequence_parallel_size"] = 0;
  EXPECT_HAS(error_of([&] { validate(c); }), "sequence_parallel_size");
}

// DeepSpeed's AutoEP (expert_parallel.enabled with autoep_size) is Tandem's parallel.expert: written there, its other
// keys without effect, refused where the two disagree or where the size is missing.
TEST(DeepSpeedKeys, AutoEpSizeIsTheExpertSetting) {
  Json c = base_cfg();
  c["expert_parallel"] = {{"enabled", true}, {"autoep_size", 2}, {"preset_model", "mixtral"}};
  TrainConfig tc = parse(validate(c), 1);
  EXPECT_EQ(tc.parallel.expert, 2);
  EXPECT_EQ(tc.no_effect_keys, std::vector<std::string>{"expert_parallel.preset_model"});
  c["expert_parallel"]["enabled"] = false;
  EXPECT_FALSE(parse(validate(c), 1).parallel.expert.has_value());
  c["expert_parallel"] = {{"enabled", true}};
  EXPECT_HAS(error_of([&] { validate(c); }), "expert_parallel.enabled needs expert_parallel.autoep_size");
  c["expert_parallel"]["autoep_size"] = 2;
  c["parallel"] = {{"expert", 4}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "expert_parallel.autoep_size 2 and parallel.expert 4 disagree: they are one setting");
  c.erase("expert_parallel");
  c["parallel"] = {{"expert", 2}};
  EXPECT_EQ(parse(validate(c), 1).parallel.expert, 2);
}

TEST(DeepSpeedKeys, MisspeltKeysGetTheNearestOfBothSets) {
  Json c = tutorial_cfg();
  c["zero_optimization"]["overlap_com"] = true;
  EXPECT_HAS(error_of([&] { validate(c); }),
             "unknown key 'zero_optimization.overlap_com': did you mean 'zero_optimization.overlap_comm'?");
  c = tutorial_cfg();
  c["zero_optimization"]["offload_optimizer"] = {{"devic", "none"}};
  EXPECT_HAS(error_of([&] { validate(c); }),
             "unknown key 'zero_optimization.offload_optimizer.devic': did you mean "
             "'zero_optimization.offload_optimizer.device'?");
  c = tutorial_cfg();
  c["tensorbord"] = {{"enabled", true}};
  EXPECT_HAS(error_of([&] { validate(c); }), "unknown key 'tensorbord': did you mean 'tensorboard'?");
  c = tutorial_cfg();
  c["fp16"]["autocast"] = false;
  EXPECT_HAS(error_of([&] { validate(c); }), "did you mean 'fp16.auto_cast'?");
  c = tutorial_cfg();
  c["optimizer"]["params"]["adam_w_mod"] = true;
  EXPECT_HAS(error_of([&] { validate(c); }), "did you mean 'optimizer.params.adam_w_mode'?");
  // Tandem's own keys keep their suggestions.
  c = tutorial_cfg();
  c["zero_optimization"]["stag"] = 1;
  EXPECT_HAS(error_of([&] { validate(c); }), "did you mean 'zero_optimization.stage'?");
}

TEST(DeepSpeedKeys, CatalogueIsWellFormed) {
  for (const DeepSpeedKey& k : deepspeed_keys()) {
    EXPECT_EQ(find_deepspeed_key(k.path), &k) << k.path;
    if (k.schema) {
      EXPECT_EQ(k.category, DsCategory::kHonoured) << k.path;
    }
    const bool can_refuse =
        k.category == DsCategory::kRefused ||
        std::any_of(k.values.begin(), k.values.end(), [](const auto& v) { return v.second == DsCategory::kRefused; });
    EXPECT_EQ(can_refuse, !k.refusal.empty()) << k.path;
    EXPECT_TRUE(k.category == DsCategory::kRefused || !k.note.empty()) << k.path;
  }
  EXPECT_EQ(find_deepspeed_key("amp.opt_level")->path, "amp.*");
  EXPECT_EQ(find_deepspeed_key("no_such_key"), nullptr);
}

TEST(DeepSpeedKeys, DocsListEveryKey) {
  const std::string text = read_doc("deepspeed.md");
  ASSERT_FALSE(text.empty()) << "docs/deepspeed.md";
  for (const DeepSpeedKey& k : deepspeed_keys())
    EXPECT_NE(text.find("`" + k.path + "`"), std::string::npos) << k.path << " is not in docs/deepspeed.md";
}

}  // namespace
}  // namespace tandem::config
