#include "tandem/plan/preflight.h"

#include <omp.h>

#include <cstdio>
#include <sstream>

#include "tandem/core/units.h"
#include "tandem/plan/search.h"

namespace tandem::plan {

namespace {

std::string bytes_str(int64_t b) { return format_bytes(static_cast<uint64_t>(std::max<int64_t>(b, 0))); }

// The config keys that select a candidate, as a user would write them.
std::string config_keys(const Candidate& c) {
  const auto& p = c.setup.plan;
  config::Json parallel = {{"virtual_gpus", p.layout.dp}, {"pipeline", p.layout.pp}, {"tensor", p.layout.tp}};
  if (p.layout.pp > 1) parallel["schedule"] = spec::schedule_name(p.schedule);
  if (p.virtual_stages > 1) parallel["virtual_stages"] = p.virtual_stages;
  if (p.activation_checkpointing) parallel["activation_checkpointing"] = true;
  std::ostringstream os;
  os << "\"parallel\": " << parallel.dump()
     << ", \"zero_optimization\": {\"stage\": " << (p.layout.dp > 1 ? c.setup.zero_stage : 0)
     << "}, \"train_micro_batch_size_per_gpu\": " << c.setup.micro_batch;
  return os.str();
}

}  // namespace

PreflightResult preflight(const config::TrainConfig& cfg, const layout::ParallelPlan& plan,
                          const PreflightOptions& options) {
  Setup s;
  s.plan = plan;
  s.zero_stage = static_cast<int>(cfg.zero_stage);
  s.micro_batch = cfg.batch.micro;
  s.micro_batches = cfg.batch.accum;
  s.dtype_bytes = options.dtype_bytes ? options.dtype_bytes : (cfg.bf16 || cfg.fp16.enabled ? 2 : 4);
  s.backend = options.backend;
  s.cpu_threads = options.cpu_threads > 0 ? options.cpu_threads : omp_get_max_threads();
  s.device = options.device;
  MemoryModel model(planned_model(cfg.model));

  PreflightResult r;
  r.memory = model.predict(s, /*every_replica=*/true);
  r.peak = r.memory.peak();
  for (int rank = 0; rank < plan.layout.world(); ++rank) r.per_rank.push_back(r.memory.of_rank(rank).peak);
  r.budget = cfg.device_memory_bytes ? cfg.device_memory_bytes : options.device_free_bytes;
  const char* budget_name = cfg.device_memory_bytes ? "\"device_memory\" " : "the GPU's free memory, ";
  r.fits = r.budget == 0 || r.peak <= static_cast<int64_t>(r.budget);
  r.time = predict_time(model, r.memory, s, builtin_rates(s.backend == Backend::Cuda ? "h200" : "cpu"));
  r.line = "predicted peak per device: " + bytes_str(r.peak);
  if (r.budget)
    r.line += (cfg.device_memory_bytes ? " (budget " : " (free on the GPU ") +
              bytes_str(static_cast<int64_t>(r.budget)) + ")";
  char speed[96];
  std::snprintf(speed, sizeof speed, "; predicted step %.1f ms (%.4g %s)", r.time.step_s * 1e3, r.time.tokens_per_s,
                r.time.unit);
  r.line += speed;
  if (r.fits) return r;

  const RankMemory& w = r.memory.worst();
  std::ostringstream os;
  os << "this run needs " << bytes_str(r.peak) << " on its fullest device (stage " << w.pp_rank << " of replica "
     << w.dp_rank << ", in the " << w.when << "), over " << budget_name << bytes_str(static_cast<int64_t>(r.budget))
     << ": " << w.at_peak.describe() << ".";
  if (options.suggest) {
    SearchOptions opt;
    opt.devices = plan.layout.world();
    opt.device_memory = r.budget;
    opt.rates = builtin_rates(s.backend == Backend::Cuda ? "h200" : "cpu");
    opt.dtype_bytes = s.dtype_bytes;
    opt.cpu_threads = s.cpu_threads;
    opt.global_batch = cfg.batch.global;
    const SearchResult found = search_layouts(model.model(), opt);
    if (!found.fit.empty()) {
      const Candidate& best = found.fit.front();
      os << " On " << opt.devices << " device" << (opt.devices == 1 ? "" : "s") << ", " << best.name()
         << " fits (predicted peak " << bytes_str(best.memory.peak()) << "): set " << config_keys(best) << ".";
    } else if (!found.no_fit.empty()) {
      const Candidate& least = found.no_fit.front();
      os << " No layout of " << opt.devices << " device" << (opt.devices == 1 ? "" : "s")
         << " fits; the smallest peak, " << bytes_str(least.memory.peak()) << " (" << least.name()
         << "), is the device memory it would need. Or use more devices: `tandem plan` lists what fits.";
    }
  }
  r.message = os.str();
  return r;
}

}  // namespace tandem::plan
