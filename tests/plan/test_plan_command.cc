// `tandem plan` end to end on the demo config: the options parse, the table lists what fits in its 768 MiB, and
// --explain's prediction for the demo's own layout is the peak the demo measured (docs/demo.md: 508.4 MiB on
// stage 0, 450.7 MiB on stage 1).
#include <gtest/gtest.h>

#include <cstdio>

#include "plan_command.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

const std::string kDemo = std::string(TANDEM_SOURCE_DIR) + "/configs/demo.json";

TEST(PlanCommand, OptionsParse) {
  CLI::App app;
  app::PlanArgs args;
  app::add_plan_options(*app.add_subcommand("plan"), args);
  app.parse("plan " + kDemo + " --devices 8 --device-memory 141GiB --nodes 2 --rates h200 --explain dp2,tp4", false);
  EXPECT_EQ(args.config, kDemo);
  EXPECT_EQ(args.devices, 8);
  EXPECT_EQ(args.device_memory, "141GiB");
  EXPECT_EQ(args.nodes, 2);
  EXPECT_EQ(args.rates, "h200");
  EXPECT_EQ(args.explain, "dp2,tp4");
}

TEST(PlanCommand, DemoTableAndExplainMatchTheDemosMeasuredPeaks) {
  app::PlanArgs args;
  args.config = kDemo;
  args.devices = 4;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(app::run_plan_command(args), 0);
  const std::string table = ::testing::internal::GetCapturedStdout();
  std::printf("%s\n", table.c_str());
  EXPECT_NE(table.find("fit in 768.0 MiB per device"), std::string::npos) << table;
  EXPECT_NE(table.find("  1  dp"), std::string::npos) << table;

  args.explain = "dp2,pp2,tp1,zero1,micro16";
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(app::run_plan_command(args), 0);
  const std::string explain = ::testing::internal::GetCapturedStdout();
  std::printf("%s\n", explain.c_str());
  // docs/demo.md measured the run when the trainer also held a 64 KiB probe batch on the device: allow 0.1 MiB.
  auto mib_after = [&](const std::string& key) {
    const size_t at = explain.find(key);
    return at == std::string::npos ? -1.0 : std::stod(explain.substr(at + key.size()));
  };
  EXPECT_NEAR(mib_after("replica 0 stage 0 (x1 tp slots): "), 508.4, 0.1) << explain;
  EXPECT_NEAR(mib_after("replica 0 stage 1 (x1 tp slots): "), 450.7, 0.1) << explain;
}

// A small llama with a device budget, written where `tandem plan` reads it.
std::string small_llama_file(const std::string& name, const std::string& extra_model = "") {
  const std::string path = ::testing::TempDir() + name;
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fprintf(f,
               "{\"model\": {\"type\": \"llama\", \"vocab_size\": 512, \"seq_len\": 64, \"hidden_size\": 64, "
               "\"intermediate_size\": 96, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 2%s}, \"train_batch_size\": 4, \"device_memory\": \"48MiB\"}\n",
               extra_model.c_str());
  std::fclose(f);
  return path;
}

TEST(PlanCommand, MaxSeqLenTakesAnOptionalBound) {
  auto parse = [](const std::string& line) {
    CLI::App app;
    app::PlanArgs args;
    app::add_plan_options(*app.add_subcommand("plan"), args);
    app.parse(line, false);
    return args;
  };
  EXPECT_EQ(parse("plan " + kDemo + " --devices 2").max_seq_len, -1);
  EXPECT_EQ(parse("plan " + kDemo + " --devices 2 --max-seq-len").max_seq_len, 0);
  EXPECT_EQ(parse("plan " + kDemo + " --max-seq-len --devices 2").max_seq_len, 0);
  const app::PlanArgs bounded = parse("plan " + kDemo + " --devices 2 --max-seq-len 524288 --seq-len-step 512");
  EXPECT_EQ(bounded.max_seq_len, 524288);
  EXPECT_EQ(bounded.seq_len_step, 512);
}

TEST(PlanCommand, MaxSeqLenPrintsTheLongestAndWhatStopsTheNext) {
  app::PlanArgs args;
  args.config = small_llama_file("plan_max_seq_len.json");
  args.devices = 2;
  args.max_seq_len = 0;
  args.seq_len_step = 256;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(app::run_plan_command(args), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  std::printf("%s\n", out.c_str());
  EXPECT_NE(out.find("multiples of 256 tokens up to 1048576 (the default bound"), std::string::npos) << out;
  EXPECT_NE(out.find("  seq_len      256  fits"), std::string::npos) << out;
  EXPECT_NE(out.find("Longest seq_len that fits: "), std::string::npos) << out;
  EXPECT_NE(out.find("What stops seq_len "), std::string::npos) << out;
  EXPECT_NE(out.find("--set model.seq_len="), std::string::npos) << out;

  // The model's max_position_embeddings under the budget's answer: it is what stops the search, and says so.
  args.config = small_llama_file("plan_max_seq_len_positions.json", ", \"max_position_embeddings\": 512");
  args.max_seq_len = 524288;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(app::run_plan_command(args), 0);
  const std::string bounded = ::testing::internal::GetCapturedStdout();
  std::printf("%s\n", bounded.c_str());
  EXPECT_NE(bounded.find("Longest seq_len that fits: 512 tokens"), std::string::npos) << bounded;
  EXPECT_NE(bounded.find("What stops it: seq_len 512 is the limit, model.max_position_embeddings"), std::string::npos)
      << bounded;
}

TEST(PlanCommand, MaxSeqLenNonsenseSaysWhatToChange) {
  app::PlanArgs args;
  args.config = small_llama_file("plan_max_seq_len_bad.json");
  args.devices = 2;
  auto says = [&](const std::string& what) {
    try {
      app::run_plan_command(args);
      ADD_FAILURE() << "not refused; expected " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  args.max_seq_len = 512;  // below the default step
  says("give --seq-len-step 512 or less, or --max-seq-len 1024 or more");
  args.max_seq_len = -1;
  args.seq_len_step = 256;
  says("--seq-len-step goes with --max-seq-len");
  args.max_seq_len = 0;
  args.explain = "dp2";
  says("--max-seq-len and --explain");
  args.explain.clear();
  args.config = kDemo;  // an mlp
  says("no seq_len to search");
}

TEST(PlanCommand, BadInputSaysWhat) {
  app::PlanArgs args;
  args.config = kDemo;
  args.devices = 4;
  args.explain = "dp3";
  EXPECT_THROW(app::run_plan_command(args), Error);
  args.explain.clear();
  args.rates = "no-such-file.json";
  EXPECT_THROW(app::run_plan_command(args), Error);
}

}  // namespace
}  // namespace tandem
