// A step's line on stdout and its monitor events (step_report.h).
#include "tandem/train/step_report.h"

#include <cstdio>
#include <string>

#include "tandem/core/units.h"

namespace tandem::train {

void print_progress(const StepMetrics& m, int64_t total, double eta_s, const char* unit) {
  char val[48] = "";
  if (m.evaluated) std::snprintf(val, sizeof val, " | val_loss %.4f", m.val_loss);
  std::printf("step %lld/%lld | loss %.4f%s | lr %.2e | grad norm %.3f | %.0f %s/s | peak %s | ETA %s\n",
              static_cast<long long>(m.step), static_cast<long long>(total), m.loss, val, m.lr, m.grad_norm,
              m.tokens_per_s, unit, format_bytes(m.peak_bytes).c_str(), format_duration(eta_s).c_str());
  std::fflush(stdout);
}

void print_skipped(const StepMetrics& m, int64_t total) {
  std::printf("step %lld/%lld | fp16 overflow (grad norm %g): update skipped, loss scale now %g\n",
              static_cast<long long>(m.step), static_cast<long long>(total), m.grad_norm, m.loss_scale);
}

std::vector<MonitorEvent> monitor_events(const StepMetrics& m, bool fp16, bool tokens) {
  // DeepSpeed's tags where it has them (train_loss, lr, loss_scale with fp16), then Tandem's under the same prefix.
  std::vector<MonitorEvent> e = {{"Train/Samples/train_loss", m.loss}, {"Train/Samples/lr", m.lr}};
  if (fp16) e.push_back({"Train/Samples/loss_scale", m.loss_scale});
  e.push_back({"Train/Samples/grad_norm", m.grad_norm});
  if (m.evaluated) e.push_back({"Train/Samples/val_loss", m.val_loss});
  e.push_back({tokens ? "Train/Samples/tokens_per_s" : "Train/Samples/samples_per_s", m.tokens_per_s});
  e.push_back({"Train/Samples/peak_memory_bytes", static_cast<double>(m.peak_bytes)});
  if (m.moe) {
    e.insert(e.end(),
             {{"Train/Samples/moe_balance_loss", m.moe_balance_loss}, {"Train/Samples/moe_max_load", m.moe_max_load}});
    // One scalar per MoE layer, named by its block: a router that collapses shows in its own layer's curve.
    for (size_t l = 0; l < m.moe_layer_max_load.size(); ++l)
      e.push_back({"Train/Samples/moe_max_load/layer_" + std::to_string(m.moe_layers.at(l)), m.moe_layer_max_load[l]});
  }
  return e;
}

}  // namespace tandem::train
