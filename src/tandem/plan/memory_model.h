// MemoryModel: each device's peak bytes for a model, a layout and a training setup, broken down by what holds
// them. It replays the engine rather than estimating it: the same model factory, the same pipeline partition
// (balance_by_parameters / gpt_stage_map), the same schedule actions (build_schedule), ZeRO's units padded to a
// multiple of dp as ParameterStore pads them, and every layer's allocations in code order (shadow.h). A rank's
// peak is what it holds all step (parameters, gradients, optimizer state) plus the highest point of its
// schedule, where each Forward / Backward action adds one micro-batch's replayed cost.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/layout/layout.h"
#include "tandem/parallel/pipeline/partition.h"
#include "tandem/plan/breakdown.h"
#include "tandem/plan/model_info.h"
#include "tandem/plan/shadow.h"

namespace tandem::plan {

// Everything besides the model that decides a device's bytes.
struct Setup {
  layout::ParallelPlan plan;  // dp x pp x tp, schedule, virtual stages, stage map, activation checkpointing
  int zero_stage = 0;         // 0-3; 0 whatever is asked when dp == 1 (as ParameterStore does)
  int64_t micro_batch = 1;    // samples per micro-batch on one virtual GPU
  int64_t micro_batches = 1;  // per step (gradient accumulation steps)
  // Compute dtype of activations and of the weights layers read: 4 (fp32, what the engine runs today) or 2
  // (bf16 / fp16). Master values, gradients and AdamW moments stay fp32 either way (ops.h's contract); a 2-byte
  // compute dtype adds a working copy of the weights in it, and ZeRO-3 gathers that copy.
  int dtype_bytes = 4;
  Backend backend = Backend::Cpu;
  int cpu_threads = 1;  // OpenMP threads per process (CPU attention scratch is per thread)
};

// One device's prediction. Every tp slot of a (replica, stage) holds the same bytes, so one stands for all.
struct RankMemory {
  int dp_rank = 0, pp_rank = 0;
  int64_t peak = 0;
  Breakdown at_peak;                        // what is live at the peak, by term
  Breakdown resident;                       // held all step: parameters, gradients, optimizer state, fixed workspaces
  std::string when;                         // "backward of micro-batch 3 (chunk 0), at blocks.2 backward"
  int live_micro_batches = 0;               // micro-batches whose activations are held at the peak (this one included)
  int activation_bound = 0;                 // the schedule's bound on it (pipeline::activation_bound)
  int64_t activations_per_micro_batch = 0;  // what one micro-batch leaves held from forward to backward
  int64_t largest_transient = 0;            // the most held as Transient inside one action
  std::string layers;                       // "layers 0..7 (embedding .. blocks.6)" for each chunk
};

struct MemoryPrediction {
  layout::Layout layout;
  std::vector<RankMemory> ranks;  // index dp_rank * pp + pp_rank
  const RankMemory& of_rank(int world_rank) const;
  const RankMemory& worst() const;
  int64_t peak() const { return worst().peak; }
};

// Holds the built models (one per tp width) and their partitions so a search can ask many setups cheaply.
class MemoryModel {
 public:
  // `model_cfg`: the config's "model" object (gpt or mlp).
  explicit MemoryModel(config::Json model_cfg);

  MemoryPrediction predict(const Setup& setup);

  const ModelInfo& model(int tp);
  // The engine's chunks (global pipeline stages) for this plan.
  const std::vector<parallel::pipeline::LayerRange>& chunks(const layout::ParallelPlan& plan);

 private:
  config::Json cfg_;
  std::map<int, std::unique_ptr<ModelInfo>> models_;
  std::map<std::pair<int, int>, std::vector<parallel::pipeline::LayerRange>> balanced_;  // by (tp, chunks)
  std::vector<parallel::pipeline::LayerRange> mapped_;  // scratch for an explicit stage map
};

}  // namespace tandem::plan
