// Preflight: before the trainer allocates anything, the memory model's prediction for this run's layout, and
// when it is over the device budget, a message that says what does not fit and what would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/layout/layout.h"
#include "tandem/plan/memory_model.h"
#include "tandem/plan/time_model.h"
#include "tandem/spec/train_config.h"

namespace tandem::plan {

struct PreflightOptions {
  int dtype_bytes = 0;             // compute dtype; 0: from the config (bf16 or fp16 enabled: 2, else 4)
  Backend backend = Backend::Cpu;  // the trainer's device: CpuDevice, or a CUDA device
  int cpu_threads = 0;             // 0: OpenMP's omp_get_max_threads() in this process
  bool suggest = true;             // when over budget, search the world size's layouts for one that fits
  // Without a "device_memory" budget in the config, the run must fit in this many bytes (a GPU's free memory
  // before the run allocates); 0: no limit.
  uint64_t device_free_bytes = 0;
  Device* device = nullptr;  // the run's device when this process has it (plan::Setup::device)
  // Offload: the host memory a node has for the ranks on it (the config's "host_memory", else what the node has
  // free; 0: no check), and how many ranks share a node.
  uint64_t host_memory_bytes = 0;
  int ranks_per_node = 1;
};

struct PreflightResult {
  // The tiles the run takes: the config's, with attention_block_bytes as chosen here where the config left it 0.
  spec::Tiles tiles;
  int64_t peak = 0;               // the largest per-device peak
  std::vector<int64_t> per_rank;  // predicted peak of every world rank
  MemoryPrediction memory;
  TimePrediction time;        // with the built-in rates of the backend ("h200" or "cpu")
  uint64_t budget = 0;        // device_memory, else PreflightOptions::device_free_bytes; 0: none
  int64_t host_peak = 0;      // offload: the largest host memory of a rank
  int64_t host_per_node = 0;  // and of a node's ranks together
  bool fits = true;
  std::string line;     // "predicted peak per device: 412.3 MiB (budget 768.0 MiB); predicted step 52.0 ms (...)"
  std::string message;  // when over budget: the breakdown, and the best layout that fits (or what it needs)
};

PreflightResult preflight(const spec::TrainConfig& cfg, const layout::ParallelPlan& plan,
                          const PreflightOptions& options = {});

}  // namespace tandem::plan
