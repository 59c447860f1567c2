#include "tandem/plan/preflight.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tandem/checkpoint/disk_space.h"
#include "tandem/core/units.h"
#include "tandem/device/cpu_device.h"
#include "tandem/ops/cuda/scratch_sizes.h"
#include "tandem/plan/search.h"

namespace tandem::plan {

namespace {

std::string bytes_str(int64_t b) { return format_bytes(static_cast<uint64_t>(std::max<int64_t>(b, 0))); }

// What a rank's host memory holds, by part: "offloaded state 18.1 MiB, checkpointed layer inputs 64.0 MiB, background
// checkpoint copy 27.2 MiB" (the parts it has). `state`: how to show the offloaded state (its total, or by purpose).
std::string host_parts(const RankMemory& r, const std::string& state) {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (r.host_peak - r.host_checkpoints() > 0) add("offloaded state " + state);
  if (r.host_checkpoints() > 0) add("checkpointed layer inputs " + bytes_str(r.host_checkpoints()));
  if (r.checkpoint_host > 0) add("background checkpoint copy " + bytes_str(r.checkpoint_host));
  return out;
}

const RankMemory& fullest_host(const MemoryPrediction& m) {
  return *std::max_element(m.ranks.begin(), m.ranks.end(), [](const RankMemory& a, const RankMemory& b) {
    return a.host_peak + a.checkpoint_host < b.host_peak + b.checkpoint_host;
  });
}

// GPUs with "tiles.attention_block_bytes" 0: the deterministic attention backward's blocks take
// kCudnnAttentionBlockDpRoomy bytes of dP rather than the rule's kCudnnAttentionBlockDpLimit when the run's plan with
// them fits the budget (ops/cuda/scratch_sizes.h: taller blocks run faster). `s` and `memory` become the taller plan's
// then. Returns the line that says so where the peak grows by it ("" otherwise).
std::string taller_attention_blocks(MemoryModel& model, Setup& s, MemoryPrediction& memory, uint64_t budget) {
  if (s.backend != Backend::Cuda || s.tiles.attention_block_bytes != 0 || budget == 0) return "";
  Setup tall = s;
  tall.tiles.attention_block_bytes = ops::cuda::kCudnnAttentionBlockDpRoomy;
  MemoryPrediction m = model.predict(tall, /*every_replica=*/true);
  if (m.peak() > static_cast<int64_t>(budget)) return "";
  const int64_t before = memory.peak();
  s = tall;
  memory = std::move(m);
  if (memory.peak() == before) return "";
  return "\nattention blocks: " + bytes_str(ops::cuda::kCudnnAttentionBlockDpRoomy) +
         " of scores' gradient each, as the device has room (" + bytes_str(ops::cuda::kCudnnAttentionBlockDpLimit) +
         " would peak at " + bytes_str(before) + "; tiles.attention_block_bytes sets it)";
}

}  // namespace

PreflightResult preflight(const spec::TrainConfig& cfg, const layout::ParallelPlan& plan,
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
  s.documents = cfg.data.document_mask || (cfg.eval.enabled && cfg.eval.data.document_mask);
  s.offload_optimizer = cfg.offload_optimizer;
  s.offload_param = cfg.offload_param;
  s.tiles = cfg.tiles;
  s.async_checkpoints = cfg.checkpoint.async && (cfg.checkpoint.every > 0 || cfg.checkpoint.at_end);
  MemoryModel model(planned_model(cfg.model, cfg.lora, cfg.fp8));

  PreflightResult r;
  r.memory = model.predict(s, /*every_replica=*/true);
  r.budget = cfg.device_memory_bytes ? cfg.device_memory_bytes : options.device_free_bytes;
  const char* budget_name = cfg.device_memory_bytes ? "\"device_memory\" " : "the GPU's free memory, ";
  const std::string taller = taller_attention_blocks(model, s, r.memory, r.budget);
  r.tiles = s.tiles;
  r.peak = r.memory.peak();
  for (int rank = 0; rank < plan.layout.world(); ++rank) r.per_rank.push_back(r.memory.of_rank(rank).peak);
  r.fits = r.budget == 0 || r.peak <= static_cast<int64_t>(r.budget);
  r.time = predict_time(model, r.memory, s, builtin_rates(s.backend == Backend::Cuda ? "h200" : "cpu"));
  r.line = "predicted peak per device: " + bytes_str(r.peak) + " (" + std::to_string(r.peak) + " bytes)";
  if (r.budget)
    r.line += (cfg.device_memory_bytes ? " (budget " : " (free on the GPU ") +
              bytes_str(static_cast<int64_t>(r.budget)) + ")";
  char speed[96];
  std::snprintf(speed, sizeof speed, "; predicted step %.1f ms (%.4g %s)", r.time.step_s * 1e3, r.time.tokens_per_s,
                r.time.unit);
  r.line += speed + taller;
  // A mixture of experts' rows per expert are the routing's: the prediction states what it assumed.
  if (const auto* llama = std::get_if<spec::LlamaConfig>(&cfg.model); llama && llama->moe.num_experts > 0) {
    r.line += "\nmixture of experts: predicted under balanced routing (each of the " +
              std::to_string(llama->moe.num_experts) + " experts takes 1/" + std::to_string(llama->moe.num_experts) +
              " of the routed rows)";
    if (plan.layout.ep > 1)
      r.line += "; with the experts over " + std::to_string(plan.layout.ep) +
                " ranks, the rows a rank receives follow the actual routing, so its peak differs from this by the "
                "imbalance";
  }
  r.host_peak = r.memory.host_peak();
  r.host_per_node = r.memory.host_per_node(options.ranks_per_node);
  if (r.host_peak > 0) {
    // "predicted host memory per rank: 45.3 MiB (offloaded state 18.1 MiB, background checkpoint copy 27.2 MiB), 181.2
    // MiB for the 4 ranks of a node, of 22.6 GiB usable"
    const RankMemory& w = fullest_host(r.memory);
    r.line += "\npredicted host memory per rank: " + bytes_str(r.host_peak);
    if (w.host_checkpoints() > 0 || w.checkpoint_host > 0)
      r.line += " (" + host_parts(w, bytes_str(w.host_peak - w.host_checkpoints())) + ")";
    if (options.ranks_per_node > 1)
      r.line +=
          ", " + bytes_str(r.host_per_node) + " for the " + std::to_string(options.ranks_per_node) + " ranks of a node";
    if (options.host_memory_bytes)
      r.line += ", of " + bytes_str(static_cast<int64_t>(options.host_memory_bytes)) +
                (cfg.host_memory_bytes ? std::string(" (\"host_memory\")")
                                       : std::string(" usable (") + device::kUsableHostMemoryRule + ")");
  }
  // nvme: the folder must be there and hold a node's swap files.
  for (const bool parameters : {false, true}) {
    const spec::OffloadConfig& o = parameters ? cfg.offload_param : cfg.offload_optimizer;
    if (o.device != spec::OffloadDevice::Nvme) continue;
    const std::string key = parameters ? "offload_param" : "offload_optimizer";
    const int64_t need = r.memory.disk_per_node(options.ranks_per_node, parameters);
    r.line += "\npredicted " + key + " swap files: " + bytes_str(need) + " a node in " + o.nvme_path;
    if (!std::filesystem::is_directory(o.nvme_path))
      TANDEM_FAIL("zero_optimization.", key, ".nvme_path '", o.nvme_path,
                  "' is not a folder: create it on a fast local disk (the swap files need ", bytes_str(need),
                  " a node), or offload to \"cpu\"");
    if (::access(o.nvme_path.c_str(), W_OK) != 0)
      TANDEM_FAIL("zero_optimization.", key, ".nvme_path '", o.nvme_path, "' is not writable (", std::strerror(errno),
                  "): choose a folder this job can write, or offload to \"cpu\"");
    checkpoint::check_free_space(
        o.nvme_path,
        {"the " + key + " swap files of a node's " + std::to_string(options.ranks_per_node) + " rank" +
             (options.ranks_per_node > 1 ? "s" : ""),
         static_cast<uint64_t>(need),
         "free space there, choose another zero_optimization." + key + ".nvme_path, or offload to \"cpu\""});
  }
  if (options.host_memory_bytes && r.host_per_node > static_cast<int64_t>(options.host_memory_bytes)) {
    r.fits = false;
    const RankMemory& w = fullest_host(r.memory);
    device::Breakdown state = w.host_at_peak;
    state[MemoryPurpose::Activations] = 0;
    const int64_t over = r.host_per_node - static_cast<int64_t>(options.host_memory_bytes);
    // The checkpointed inputs have their own remedies; the offloaded state and the background copy theirs.
    const bool inputs = w.host_checkpoints() > 0;
    std::vector<std::string> remedies;
    if (inputs) {
      remedies.push_back("keep the checkpointed layer inputs on the device (parallel.cpu_checkpointing false)");
      remedies.push_back(
          "hold fewer of them per rank (a smaller train_micro_batch_size_per_gpu, more "
          "parallel.pipeline stages)");
    }
    if (!inputs || w.host_peak - w.host_checkpoints() > 0)
      remedies.push_back("offload less (zero_optimization.offload_optimizer.ratio below 1, or no offload_param)");
    if (!inputs || w.checkpoint_host > 0)
      remedies.push_back("write checkpoints at the step boundary (checkpoint.async false)");
    remedies.push_back("use more nodes");
    remedies.push_back("set \"host_memory\" if the node has more than it reports");
    r.message = std::string(inputs ? "host memory too small for the checkpoints: " : "") + "this run needs " +
                bytes_str(r.host_per_node) + " of host memory on a node (" + std::to_string(options.ranks_per_node) +
                " rank" + (options.ranks_per_node > 1 ? "s" : "") + ", the fullest " +
                bytes_str(w.host_peak + w.checkpoint_host) + ": " + host_parts(w, state.describe()) + "), " +
                bytes_str(over) + " over the " + bytes_str(static_cast<int64_t>(options.host_memory_bytes)) +
                (cfg.host_memory_bytes ? std::string(" of \"host_memory\"")
                                       : std::string(" the node can give it (") + device::kUsableHostMemoryRule + ")") +
                ": ";
    for (size_t i = 0; i < remedies.size(); ++i)
      r.message += (i == 0 ? "" : i + 1 == remedies.size() ? ", or " : ", ") + remedies[i];
    return r;
  }
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
    opt.host_memory = options.host_memory_bytes;
    const SearchResult found = search_layouts(model.model(), opt);
    if (!found.fit.empty()) {
      const Candidate& best = found.fit.front();
      os << " On " << opt.devices << " device" << (opt.devices == 1 ? "" : "s") << ", " << best.name()
         << " fits (predicted peak " << bytes_str(best.memory.peak()) << "): set " << best.config_keys() << ".";
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
