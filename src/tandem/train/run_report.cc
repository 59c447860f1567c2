// The peaks and the profile printed at a run's end (run_report.h).
#include "tandem/train/run_report.h"

#include <cstdio>
#include <vector>

#include "tandem/core/units.h"
#include "tandem/ops/profile.h"

namespace tandem::train {

void report_run(int64_t last_step, const config::TrainConfig& cfg, const layout::ParallelPlan& plan,
                parallel::Engine& engine, const device::AccountedDevice& device, layout::Groups& groups, bool print) {
  const layout::Layout& l = groups.layout;
  // Each device's peak, gathered to rank 0 one rank at a time (a handful of scalars).
  std::vector<double> peaks, host_peaks;
  for (int r = 0; r < l.world(); ++r)
    peaks.push_back(groups.world->all_reduce_scalar(r == groups.rank ? static_cast<double>(device.peak_bytes()) : 0.0,
                                                    comm::ReduceOp::Sum));
  if (const device::AccountedDevice* host = engine.host_memory())
    for (int r = 0; r < l.world(); ++r)
      host_peaks.push_back(groups.world->all_reduce_scalar(
          r == groups.rank ? static_cast<double>(host->peak_bytes()) : 0.0, comm::ReduceOp::Sum));
  if (!print) return;
  std::printf("done: %lld steps. Peak memory per device:", static_cast<long long>(last_step));
  for (int r = 0; r < l.world(); ++r)
    std::printf(" %s%d %s%s", device.kind() == DeviceKind::Cpu ? "cpu:" : "rank ", r,
                format_bytes(static_cast<uint64_t>(peaks[r])).c_str(), r + 1 < l.world() ? "," : "");
  if (cfg.device_memory_bytes) std::printf(" (budget %s each)", format_bytes(cfg.device_memory_bytes).c_str());
  std::printf("\n");
  if (!host_peaks.empty()) {
    const bool inputs = plan.activation_checkpointing && plan.cpu_checkpointing;
    const bool state = cfg.offload_optimizer.enabled();
    std::printf("%s in host memory, peak per rank:", !inputs ? "offloaded state"
                                                     : state ? "offloaded state and checkpointed layer inputs"
                                                             : "checkpointed layer inputs");
    for (int r = 0; r < l.world(); ++r)
      std::printf(" %d %s%s", r, format_bytes(static_cast<uint64_t>(host_peaks[r])).c_str(),
                  r + 1 < l.world() ? "," : "");
    std::printf("\n");
  }
  // What rank 0 held at its peak and when, in the planner's terms (`tandem plan --explain` gives the prediction).
  std::printf("rank 0 at its peak (%s): %s\n", device.peak_label().empty() ? "setup" : device.peak_label().c_str(),
              device.at_peak().describe().c_str());
  if (ops::profile::enabled()) std::printf("%s", ops::profile::table(ops::profile::summary(), "rank 0").c_str());
  std::fflush(stdout);
}

}  // namespace tandem::train
