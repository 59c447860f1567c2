// metrics.jsonl: opening it for a fresh or resumed run, and one line per step (metrics_file.h).
#include "tandem/train/metrics_file.h"

#include <filesystem>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/core/error.h"

namespace tandem::train {

namespace fs = std::filesystem;

namespace {

// Keeps the lines of an earlier metrics.jsonl up to `last_step`, so a resumed run continues the same file.
void truncate_metrics(const fs::path& path, int64_t last_step) {
  std::vector<std::string> kept;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    try {
      if (config::Json::parse(line).at("step").get<int64_t>() <= last_step) kept.push_back(line);
    } catch (const std::exception&) {
      // A torn last line from a killed run: drop it.
    }
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : kept) out << l << "\n";
}

}  // namespace

MetricsFile::MetricsFile(const std::string& out_dir, int64_t start, int64_t predicted_peak_bytes)
    : predicted_peak_bytes_(predicted_peak_bytes) {
  const fs::path out(out_dir);
  fs::create_directories(out);
  if (start > 0) truncate_metrics(out / "metrics.jsonl", start);
  file_.open(out / "metrics.jsonl", start > 0 ? std::ios::app : std::ios::trunc);
  if (!file_) TANDEM_FAIL("cannot write '", (out / "metrics.jsonl").string(), "'");
}

void MetricsFile::write(const StepMetrics& m) {
  if (!file_.is_open()) return;
  config::Json line = {{"step", m.step},
                       {"loss", m.loss},
                       {"lr", m.lr},
                       {"grad_norm", m.grad_norm},
                       {"step_s", m.step_seconds},
                       {"tokens_per_s", m.tokens_per_s},
                       {"peak_bytes", m.peak_bytes},
                       {"loss_scale", m.loss_scale},
                       {"skipped", m.skipped}};
  if (predicted_peak_bytes_ > 0) line["predicted_peak_bytes"] = predicted_peak_bytes_;
  if (m.evaluated) line["val_loss"] = m.val_loss;
  if (m.checkpoint_s > 0) line["checkpoint_s"] = m.checkpoint_s;
  if (m.checkpoint_writing) line["checkpoint_writing"] = true;
  if (m.moe)
    line.update({{"moe_balance_loss", m.moe_balance_loss},
                 {"moe_max_load", m.moe_max_load},
                 {"moe_layer_max_load", m.moe_layer_max_load}});
  file_ << line.dump() << "\n";
  file_.flush();
}

}  // namespace tandem::train
