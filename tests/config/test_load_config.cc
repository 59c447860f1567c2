// Reading config files: --set overrides of any type, file errors, repeated keys, and the shipped configs.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "config_test_util.h"
#include "tandem/config/config.h"
#include "tandem/core/error.h"
#include "test_util.h"

namespace tandem::config {
namespace {

using tandem::testing::error_of;

TEST(Override, NestedNumbersBooleansArraysStrings) {
  Json c = mlp_cfg();
  apply_override(c, "optimizer.params.lr=3e-4");
  apply_override(c, "fp16.enabled=true");
  apply_override(c, "optimizer.params.betas=[0.8,0.95]");
  apply_override(c, "optimizer.type=Adam");
  apply_override(c, "steps=7");
  apply_override(c, "parallel={\"pipeline\": 2}");
  apply_override(c, "model.sizes=[2,3]");
  EXPECT_DOUBLE_EQ(c["optimizer"]["params"]["lr"].get<double>(), 3e-4);
  EXPECT_EQ(c["fp16"]["enabled"], true);
  EXPECT_EQ(c["optimizer"]["params"]["betas"], Json::parse("[0.8, 0.95]"));
  EXPECT_EQ(c["optimizer"]["type"], "Adam");
  EXPECT_EQ(c["steps"], 7);
  EXPECT_EQ(c["parallel"]["pipeline"], 2);
  EXPECT_EQ(c["model"]["sizes"], Json::parse("[2, 3]"));
  EXPECT_NO_THROW(validate(c));

  apply_override(c, "data.path=my file.txt");
  EXPECT_EQ(c["data"]["path"], "my file.txt");
  EXPECT_HAS(error_of([&] { apply_override(c, "steps"); }), "override 'steps' has no '='");
  EXPECT_HAS(error_of([&] { apply_override(c, "a..b=1"); }), "empty key part");
  EXPECT_HAS(error_of([&] { apply_override(c, "steps.x=1"); }), "'steps' is 7, not an object");
}

TEST(LoadConfig, FileErrorsAndOverrides) {
  TempDir dir;
  const std::string good = dir.write("good.json", mlp_cfg().dump(2));
  const Json v = load_config(good, {"steps=5", "optimizer.params.lr=0.01"});
  EXPECT_EQ(v["steps"], 5);
  EXPECT_DOUBLE_EQ(v["optimizer"]["params"]["lr"].get<double>(), 0.01);

  const std::string bad = dir.write("bad.json", "{\n  \"steps\": 5,\n  \"seed\" 3\n}\n");
  std::string msg = error_of([&] { load_config(bad, {}); });
  EXPECT_HAS(msg, "config file '" + bad + "' is not valid JSON: line 3");
  EXPECT_HAS(msg, "syntax error");

  msg = error_of([&] { load_config(dir.write("arr.json", "[1, 2]"), {}); });
  EXPECT_HAS(msg, "must hold a JSON object");

  const std::string missing = (std::filesystem::path(good).parent_path() / "nope.json").string();
  EXPECT_HAS(error_of([&] { load_config(missing, {}); }), "cannot open config file '" + missing + "'");

  msg = error_of([&] { load_config(good, {"optimizer.params.lrr=1"}); });
  EXPECT_HAS(msg, "config file '" + good + "' (with overrides): unknown key 'optimizer.params.lrr'");
}

TEST(LoadConfig, RepeatedKeysAreRefused) {
  TempDir dir;
  const Json ok = mlp_cfg();
  std::string text = ok.dump();
  text.insert(1, "\"steps\": 5, \"steps\": 7, ");
  std::string f = dir.write("top.json", text);
  EXPECT_HAS(error_of([&] { load_config(f, {}); }),
             "config file '" + f + "': key 'steps' appears twice in the same object; JSON readers keep only the last");
  f = dir.write("nested.json", R"({"train_batch_size": 8, "model": {"type": "mlp", "sizes": [4, 3]},
      "zero_optimization": {"stage": 1, "overlap_comm": true, "stage": 2}})");
  EXPECT_HAS(error_of([&] { load_config(f, {}); }), "key 'zero_optimization.stage' appears twice");
  f = dir.write("array.json", R"({"train_batch_size": 8, "model": {"type": "gpt", "vocab_size": 8, "seq_len": 4,
      "dim": 8, "layers": 2, "heads": 2}, "parallel": {"stages": [[0, 1], {"a": 1, "a": 2}]}})");
  EXPECT_HAS(error_of([&] { load_config(f, {}); }), "key 'parallel.stages[1].a' appears twice");
  // The same key in different objects, and comments, are fine.
  f = dir.write("fine.json", R"({"train_batch_size": 8, // a comment
      "model": {"type": "mlp", "sizes": [4, 3]}, "fp16": {"enabled": false}, "bf16": {"enabled": false}})");
  EXPECT_NO_THROW(load_config(f, {}));
}

TEST(LoadConfig, ShippedConfigsValidate) {
  const std::filesystem::path dir = std::filesystem::path(TANDEM_SOURCE_DIR) / "configs";
  ASSERT_TRUE(std::filesystem::exists(dir)) << dir << " does not exist";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++count;
    EXPECT_NO_THROW(parse(load_config(entry.path().string(), {}), 1)) << entry.path();
  }
  EXPECT_GT(count, 0);
}

}  // namespace
}  // namespace tandem::config
