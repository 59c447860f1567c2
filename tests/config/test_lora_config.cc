// The "lora" object: PEFT's defaults, the family's default targets, the refusals (unknown keys with the nearest one,
// biases, other initialisations, an mlp, a bad regular expression), and "from_pretrained" on a PEFT adapter folder:
// its values taken, a differing one refused, lora_dropout beside it kept, PEFT features that change the function
// refused by name, idempotence; target_parameters (the experts' adapters) read from the config and from a folder, with
// target_modules [] beside it, and refused beside lora_dropout.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tandem/config/config.h"
#include "test_util.h"

namespace tandem::config {
namespace {

using tandem::testing::error_of;

Json llama_cfg(Json lora) {
  Json cfg = Json::parse(R"({"train_batch_size": 8, "model": {"type": "llama", "vocab_size": 64, "seq_len": 16,
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4}})");
  cfg["lora"] = std::move(lora);
  return cfg;
}

class AdapterDir {
 public:
  explicit AdapterDir(const Json& config) {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("tandem_lora_config_test_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
    std::ofstream(path_ / "adapter_config.json") << config.dump(2);
    std::ofstream(path_ / "adapter_model.safetensors") << "";  // the weights are read by the trainer, not here
  }
  ~AdapterDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// What PeftModel.save_pretrained writes for LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"]).
Json peft_adapter_config() {
  return Json::parse(R"({"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "base",
    "r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": ["v_proj", "q_proj"], "use_rslora": false,
    "bias": "none", "fan_in_fan_out": false, "init_lora_weights": true, "inference_mode": true,
    "modules_to_save": null, "layers_to_transform": null, "layers_pattern": null, "rank_pattern": {},
    "alpha_pattern": {}, "use_dora": false, "lora_bias": false, "megatron_core": "megatron.core",
    "qalora_group_size": 16, "peft_version": "0.17.0", "loftq_config": {}, "eva_config": null})");
}

TEST(LoraConfig, PeftsDefaultsAndTheFamilysTargets) {
  const Json v = validate(llama_cfg(Json::object()));
  EXPECT_EQ(v["lora"]["r"], 8);
  EXPECT_EQ(v["lora"]["lora_alpha"], 8.0);
  EXPECT_EQ(v["lora"]["lora_dropout"], 0.0);
  EXPECT_EQ(v["lora"]["target_modules"], Json({"q_proj", "v_proj"}));
  EXPECT_EQ(v["lora"]["bias"], "none");
  EXPECT_EQ(v["lora"]["use_rslora"], false);
  const spec::LoraConfig l = lora_config(v);
  EXPECT_TRUE(l.enabled);
  EXPECT_DOUBLE_EQ(l.scaling(), 1.0);
  EXPECT_EQ(l.init, spec::LoraInit::Default);
  Json gpt = Json::parse(R"({"train_batch_size": 8, "lora": {},
    "model": {"type": "gpt", "vocab_size": 64, "seq_len": 16, "dim": 32, "layers": 2, "heads": 4}})");
  EXPECT_EQ(validate(gpt)["lora"]["target_modules"], Json({"c_attn"}));
  EXPECT_FALSE(lora_config(validate(llama_cfg(nullptr))).enabled);  // "lora": null is no LoRA
  EXPECT_FALSE(validate(llama_cfg(nullptr)).contains("lora"));
}

TEST(LoraConfig, ScalingInitialisationsAndTargetForms) {
  spec::LoraConfig l = lora_config(validate(llama_cfg({{"r", 16},
                                                       {"lora_alpha", 32},
                                                       {"use_rslora", true},
                                                       {"init_lora_weights", false},
                                                       {"target_modules", "all-linear"}})));
  EXPECT_DOUBLE_EQ(l.scaling(), 32.0 / 4.0);  // alpha / sqrt(r)
  EXPECT_EQ(l.init, spec::LoraInit::Random);
  EXPECT_EQ(l.target_modules, std::vector<std::string>{"all-linear"});
  l = lora_config(validate(llama_cfg({{"init_lora_weights", "gaussian"}, {"target_modules", ".*\\.(q|v)_proj"}})));
  EXPECT_EQ(l.init, spec::LoraInit::Gaussian);
  EXPECT_EQ(l.target_regex, ".*\\.(q|v)_proj");
  EXPECT_TRUE(l.target_modules.empty());
}

TEST(LoraConfig, RefusalsSayWhatToDo) {
  EXPECT_HAS(error_of([] { validate(llama_cfg({{"lora_alhpa", 16}})); }), "did you mean 'lora.lora_alpha'");
  EXPECT_HAS(error_of([] { validate(llama_cfg({{"bias", "all"}})); }), "set \"bias\": \"none\"");
  EXPECT_HAS(error_of([] { validate(llama_cfg({{"init_lora_weights", "pissa"}})); }), "lora.from_pretrained");
  EXPECT_HAS(error_of([] { validate(llama_cfg({{"lora_dropout", 1.0}})); }), "below 1");
  EXPECT_HAS(error_of([] { validate(llama_cfg({{"r", 0}})); }), "lora.r");
  EXPECT_HAS(error_of([] { validate(llama_cfg({{"target_modules", "(q_proj"}})); }), "valid regular expression");
  EXPECT_HAS(error_of([] { validate(llama_cfg({{"target_modules", Json::array()}})); }), "lora.target_modules");
  EXPECT_HAS(error_of([] { validate(llama_cfg({{"task_type", "SEQ_CLS"}})); }), "CAUSAL_LM");
  Json offloaded = llama_cfg({{"r", 4}});
  offloaded["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}};
  EXPECT_HAS(error_of([&] { validate(offloaded); }), "remove the offload keys");
  Json mlp = Json::parse(R"({"train_batch_size": 8, "model": {"type": "mlp", "sizes": [4, 8, 3]}, "lora": {}})");
  EXPECT_HAS(error_of([&] { validate(mlp); }), "use a gpt or llama model");
}

TEST(LoraConfig, FromPretrainedTakesTheAdaptersValues) {
  const AdapterDir dir(peft_adapter_config());
  const Json v = validate(llama_cfg({{"from_pretrained", dir.path()}}));
  EXPECT_EQ(v["lora"]["r"], 16);
  EXPECT_EQ(v["lora"]["lora_alpha"], 32);
  EXPECT_EQ(v["lora"]["lora_dropout"], 0.05);
  EXPECT_EQ(v["lora"]["target_modules"], Json({"v_proj", "q_proj"}));
  EXPECT_EQ(validate(v), v);  // idempotent: the values now agree with the folder's
  const spec::LoraConfig l = lora_config(v);
  EXPECT_EQ(l.from_pretrained, dir.path());
  EXPECT_DOUBLE_EQ(l.scaling(), 2.0);
  // The same values beside it agree (target_modules as a set); another is refused with both.
  EXPECT_NO_THROW(
      validate(llama_cfg({{"from_pretrained", dir.path()}, {"r", 16}, {"target_modules", {"q_proj", "v_proj"}}})));
  const std::string e = error_of([&] { validate(llama_cfg({{"from_pretrained", dir.path()}, {"r", 8}})); });
  EXPECT_HAS(e, "'lora.r' is 8");
  EXPECT_HAS(e, "says 16");
  // lora_dropout only changes training noise: the config's wins.
  EXPECT_EQ(validate(llama_cfg({{"from_pretrained", dir.path()}, {"lora_dropout", 0.2}}))["lora"]["lora_dropout"], 0.2);
}

TEST(LoraConfig, FromPretrainedRefusesWhatPlainLoraDoesNotCompute) {
  for (const auto& [key, value, part] :
       std::vector<std::tuple<std::string, Json, std::string>>{{"use_dora", true, "DoRA"},
                                                               {"modules_to_save", {"lm_head"}, "whole modules"},
                                                               {"rank_pattern", {{"q_proj", 4}}, "per-module ranks"},
                                                               {"layers_to_transform", {0}, "subset of the layers"},
                                                               {"bias", "lora_only", "set \"bias\": \"none\""},
                                                               {"peft_type", "IA3", "LoRA adapters"},
                                                               {"some_future_feature", 3, "does not support it"}}) {
    Json a = peft_adapter_config();
    a[key] = value;
    const AdapterDir dir(a);
    EXPECT_HAS(error_of([&] { validate(llama_cfg({{"from_pretrained", dir.path()}})); }), part) << key;
  }
  EXPECT_HAS(error_of([] { validate(llama_cfg({{"from_pretrained", "/nonexistent/adapter"}})); }), "not a folder");
}

TEST(LoraConfig, TargetParametersAdaptTheExpertsWithoutDropout) {
  const Json experts = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  spec::LoraConfig l = lora_config(validate(llama_cfg({{"target_parameters", experts}})));
  EXPECT_EQ(l.target_parameters, experts.get<std::vector<std::string>>());
  EXPECT_EQ(l.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));  // PEFT's default beside them too
  EXPECT_TRUE(lora_config(validate(llama_cfg(Json::object()))).target_parameters.empty());
  // target_modules [] adapts no module, as PEFT's: only beside target_parameters.
  l = lora_config(validate(llama_cfg({{"target_parameters", experts}, {"target_modules", Json::array()}})));
  EXPECT_TRUE(l.target_modules.empty());
  EXPECT_HAS(error_of([&] {
               validate(llama_cfg({{"target_parameters", experts}, {"lora_dropout", 0.1}}));
             }),
             "the experts' adapters take no dropout");
  EXPECT_HAS(error_of([] {
               validate(llama_cfg({{"target_parameters", "mlp.experts.down_proj"}}));
             }),
             "lora.target_parameters");
  EXPECT_HAS(error_of([] { validate(llama_cfg({{"target_parameters", {""}}})); }), "lora.target_parameters");
  // From a folder: the adapter's own, with its lora_dropout 0; a config's dropout beside it is refused.
  Json a = peft_adapter_config();
  a["target_parameters"] = experts;
  a["target_modules"] = Json::array();
  a["lora_dropout"] = 0.0;
  const AdapterDir dir(a);
  const Json v = validate(llama_cfg({{"from_pretrained", dir.path()}}));
  EXPECT_EQ(v["lora"]["target_parameters"], experts);
  EXPECT_EQ(validate(v), v);
  EXPECT_TRUE(lora_config(v).target_modules.empty());
  EXPECT_HAS(error_of([&] {
               validate(llama_cfg({{"from_pretrained", dir.path()}, {"lora_dropout", 0.05}}));
             }),
             "take no dropout");
  EXPECT_HAS(error_of([&] {
               validate(llama_cfg({{"from_pretrained", dir.path()}, {"target_parameters", {"mlp.experts.down_proj"}}}));
             }),
             "'lora.target_parameters'");
}

}  // namespace
}  // namespace tandem::config
