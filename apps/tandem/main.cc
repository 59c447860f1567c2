// The tandem command line: `tandem train CONFIG.json [--out DIR] [--set key=value]... [--resume DIR]`.
// The only place that catches errors and exits.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/core/error.h"
#include "tandem/train/trainer.h"

namespace {

int run_train(const std::string& config_path, const std::vector<std::string>& overrides, const std::string& out,
              const std::string& resume) {
  const tandem::config::Json cfg = tandem::config::load_config(config_path, overrides);
  const tandem::config::TrainConfig tc = tandem::config::parse(cfg, 1);
  tandem::train::TrainOptions opt;
  opt.out_dir = out;
  opt.resume = resume;
  tandem::train::Trainer trainer = tandem::train::Trainer::from_config(tc, opt);
  trainer.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tandem: train models too big for one device on several, used as fewer, bigger ones."};
  app.require_subcommand(1);

  CLI::App* train = app.add_subcommand("train", "Train a model from a JSON config");
  std::string config_path, out = "runs/latest", resume;
  std::vector<std::string> overrides;
  train->add_option("config", config_path, "The JSON config (DeepSpeed key names where they exist)")
      ->required()
      ->check(CLI::ExistingFile);
  train->add_option("--out", out, "Folder for metrics.jsonl and checkpoints/")->capture_default_str();
  train->add_option("--set", overrides, "Override a config key, e.g. --set optimizer.params.lr=3e-4")
      ->take_all()
      ->allow_extra_args(false);
  train->add_option("--resume", resume, "Continue from a checkpoint folder or a run folder");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*train) return run_train(config_path, overrides, out, resume);
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
