// `tandem plan` end to end on the demo config: the options parse, the table lists what fits in its 768 MiB, and
// --explain's prediction for the demo's own layout is the peak the demo measured (docs/demo.md: 508.4 MiB on
// stage 0, 450.7 MiB on stage 1).
#include <gtest/gtest.h>

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
