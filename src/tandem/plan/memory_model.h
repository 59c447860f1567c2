// MemoryModel: each device's peak bytes for a model, a layout and a training setup, broken down by what holds
// them, found by running the engine: for each pipeline position it builds the real parallel::Engine of one rank
// on a counting device (device/counting_device.h) with stand-in groups (comm/stand_in.h) and runs one step's
// schedule. Every allocation the engine, its layers and the planned backend's kernels make is accounted as it is
// made; nothing here knows what a layer allocates. The planner installs its own parts on the engine's executor: the
// chunk replay (chunk_replay.h), which accounts most chunk calls without running them, the device's labels of each
// action, and a log of the work of every action (the time model's input, time_model.h).
#pragma once

#include <string>
#include <vector>

#include "tandem/device/breakdown.h"
#include "tandem/device/counting_device.h"
#include "tandem/layout/layout.h"
#include "tandem/parallel/pipeline/schedule.h"
#include "tandem/plan/planned_model.h"

namespace tandem::plan {

// Which op implementations' scratch the run accounts (ops/cpu or ops/cuda).
enum class Backend { Cpu, Cuda };

// Everything besides the model that decides a device's bytes.
struct Setup {
  layout::ParallelPlan plan;  // dp x pp x tp, schedule, virtual stages, stage map, activation checkpointing
  int zero_stage = 0;         // 0-3; 0 whatever is asked when dp == 1 (as ParameterStore does)
  int64_t micro_batch = 1;    // samples per micro-batch on one virtual GPU
  int64_t micro_batches = 1;  // per step (gradient accumulation steps)
  // Compute dtype of activations and of the weights layers read: 4 (fp32) or 2 (bf16 / fp16). Master values,
  // gradients and AdamW moments stay fp32 either way (ops.h's contract).
  int dtype_bytes = 4;
  Backend backend = Backend::Cpu;
  int cpu_threads = 1;  // OpenMP threads per process (CPU attention scratch is per thread)
  // The device the run will use, when this process has it: CUDA kernels whose scratch only their library knows
  // (cuDNN's attention workspace) are asked there; without it that scratch is estimated (ops/cuda/scratch.cc).
  Device* device = nullptr;
  bool documents = false;  // the batches carry each position's document (data.document_mask)
  spec::Tiles tiles;       // the tokens the loss and the MLPs take at once ("tiles"; 0: their rules' choice)
  // What the run offloads to host memory (zero_optimization.offload_optimizer, offload_param).
  spec::OffloadConfig offload_optimizer;
  spec::OffloadConfig offload_param;
  // Checkpoints written in the background (checkpoint.async): their host copy of each rank's state counts too.
  bool async_checkpoints = false;
};

// One device's prediction. Every tp slot of a (replica, stage) holds the same bytes, so one stands for all.
struct RankMemory {
  int dp_rank = 0, pp_rank = 0;
  int64_t peak = 0;
  device::Breakdown at_peak;                // what is live at the peak, by purpose
  device::Breakdown resident;               // held all step: what the engine holds once built
  std::string when;                         // "backward of micro-batch 3 (chunk 0), at blocks.2 backward"
  int live_micro_batches = 0;               // micro-batches whose activations are held at the peak
  int activation_bound = 0;                 // the schedule's bound on it (pipeline::activation_bound)
  int64_t activations_per_micro_batch = 0;  // activations at the peak over the micro-batches held then
  std::string layers;                       // "layers 0..7 (embedding .. blocks.6)" for each chunk
  // Host memory the rank's offloaded state and checkpointed layer inputs take (0 with neither), accounted as the
  // device's is.
  int64_t host_peak = 0;
  device::Breakdown host_at_peak;
  device::Breakdown host_resident;
  // Of host_peak: the checkpointed layer inputs (parallel.cpu_checkpointing), the host's only activations.
  int64_t host_checkpoints() const { return host_at_peak[MemoryPurpose::Activations]; }
  int64_t checkpoint_host = 0;  // the background checkpoint's host copy of the rank's state (held from the first on)
  int64_t disk_bytes = 0;       // the rank's swap files (offload to nvme): the optimizer's and the parameters'
  int64_t disk_optimizer = 0, disk_parameters = 0;
};

// The work one action of a schedule recorded.
struct ActionWork {
  parallel::pipeline::Action action;
  device::WorkLog work;
};

// The work one pipeline position's step recorded: each action of its schedule, then the end of the step
// (gradient reduction, norm, optimizer).
struct RankWork {
  std::vector<ActionWork> actions;
  device::WorkLog end;
  device::WorkLog host;  // what the step ran on the host (offload: the host AdamW and the gradients' sums)
};

struct MemoryPrediction {
  layout::Layout layout;
  std::vector<RankMemory> ranks;  // index dp_rank * pp + pp_rank (dp_rank: the ZeRO group's, dp * cp + context shard)
  std::vector<RankWork> work;     // by pp rank (dp rank 0; every replica does the same work)
  // The engine was built but no step run: its resident state alone is over the budget asked about, so each
  // rank's peak is its resident state (a lower bound) and there is no work to price.
  bool resident_only = false;
  const RankMemory& of_rank(int world_rank) const;
  const RankMemory& worst() const;
  int64_t peak() const { return worst().peak; }
  // The largest host peak of a rank (offloaded state and background checkpoint copy), and the most host memory any
  // `ranks_per_node` consecutive world ranks (one node's, as mpirun places them) take together.
  int64_t host_peak() const;
  int64_t host_per_node(int ranks_per_node) const;
  // Likewise the swap files' bytes on a node's disk: the optimizer's, the parameters' (offload to nvme).
  int64_t disk_per_node(int ranks_per_node, bool parameters) const;
};

class MemoryModel {
 public:
  explicit MemoryModel(PlannedModel model);

  // `every_replica`: build every dp rank's engine too (they differ only in the optimizer state of the shard each
  // owns, by padding); otherwise dp rank 0, which owns the most, stands for all. `budget` (0: none): a rank whose
  // engine holds more once built cannot fit, and no step is run (MemoryPrediction::resident_only).
  MemoryPrediction predict(const Setup& setup, bool every_replica = false, uint64_t budget = 0);

  const PlannedModel& model() const { return model_; }
  // Parameters of the whole model (every tp slot together).
  int64_t logical_parameters();

 private:
  PlannedModel model_;
  int64_t logical_parameters_ = -1;
};

}  // namespace tandem::plan
