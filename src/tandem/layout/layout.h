// Layout: how the job's devices are cut into virtual GPUs. dp virtual GPUs (data-parallel replicas), each
// of pp pipeline stages x cp context-parallel shards x tp tensor-parallel slots. Rank map:
// rank = tp_rank + tp * (cp_rank + cp * (pp_rank + pp * dp_rank)), so the devices of one virtual GPU are neighbours,
// tensor-parallel peers nearest of all, then the context-parallel shards of one stage (both exchange inside a layer).
// Context parallelism splits each sequence over cp devices (nn/context_split.h); cp = 1 unless asked for.
// Example, 8 devices as dp 2 x pp 2 x tp 2:
//   rank:    0 1 2 3 | 4 5 6 7
//   vgpu:    0 0 0 0 | 1 1 1 1
//   stage:   0 0 1 1 | 0 0 1 1
//   tp slot: 0 1 0 1 | 0 1 0 1
// A value type: no globals; the communicators of each axis are built from it (groups.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tandem/spec/model_config.h"
#include "tandem/spec/schedule.h"
#include "tandem/spec/train.h"

namespace tandem::layout {

// Expert parallelism (ep) is not an axis of its own: it cuts each ZeRO group (the replicas() ranks of one stage and tp
// slot) into groups of ep neighbours, each holding 1/ep of every mixture-of-experts layer's experts and exchanging
// tokens with the others (nn/moe.h); replica q is expert slot q % ep of the expert group q / ep.
struct Layout {
  int dp = 1, pp = 1, tp = 1, cp = 1;
  int ep = 1;  // expert-parallel slots inside the replicas; divides replicas()
  int world() const { return dp * pp * cp * tp; }
  int vgpu_size() const { return pp * cp * tp; }
  // The ranks that hold the same parameters and reduce their gradients together (ZeRO's group): the virtual GPUs'
  // replicas times the context shards of one sequence, each of which computes gradients from its own tokens.
  int replicas() const { return dp * cp; }
  // Ranks that hold the same experts and reduce their gradients together: replicas() / ep.
  int expert_replicas() const { return replicas() / ep; }
  std::string str() const;  // "dp 2 x pp 2 x tp 1", then " x cp 2" when context-parallel, " (ep 2)" with experts
};

struct Coord {
  int dp = 0, pp = 0, tp = 0, cp = 0;
};

Coord coord_of(const Layout& layout, int rank);
// The rank's place among the replicas that hold the same parameters (ZeRO's dp group): dp * cp + its context shard.
inline int replica_of(const Layout& l, const Coord& c) { return c.dp * l.cp + c.cp; }
// Its expert slot (the rank in its expert-parallel group) and its rank among the ranks holding the same experts.
inline int expert_slot_of(const Layout& l, const Coord& c) { return replica_of(l, c) % l.ep; }
inline int expert_replica_of(const Layout& l, const Coord& c) { return replica_of(l, c) / l.ep; }
int rank_of(const Layout& layout, const Coord& c);

// Everything the "parallel" config object says, resolved against the world size.
struct ParallelPlan {
  Layout layout;
  // How attention runs over the cp shards (parallel.context_attention): auto, heads or ring as the config asks; each
  // block resolves auto by its heads (spec::context_attention_used).
  spec::ContextAttention context_attention = spec::ContextAttention::Auto;
  spec::ScheduleKind schedule = spec::ScheduleKind::OneFOneB;
  int virtual_stages = 1;
  bool activation_checkpointing = false;
  bool cpu_checkpointing = false;  // the checkpointed layer inputs in host memory (needs activation_checkpointing)
  bool keep_attention = false;     // attention not run again in the recomputation (needs activation_checkpointing)
  // With cpu_checkpointing: the first layers of each chunk whose inputs go to host memory; -1: every one that can.
  int64_t cpu_checkpointing_layers = -1;
  std::vector<std::pair<int64_t, int64_t>> stages;  // explicit stage map of blocks (inclusive ranges); empty: balance
  double timeout_s = spec::ParallelConfig::kDefaultTimeoutS;  // the communication watchdog
};

// From the config's "parallel" object (null/absent: everything 1 except what the world size implies, i.e.
// dp = world). Any of virtual_gpus, pipeline, tensor may be omitted and is derived from the world size; a
// layout that does not multiply to the world size is an error that says how to fix it.
ParallelPlan resolve_parallel(const spec::ParallelConfig& parallel, int world_size);

// Checks the plan against the model (layers over stages, heads and vocabulary over tp, mlp widths over tp)
// and the batch (interleaving needs micro-batches divisible by pp). Throws Error with what to change.
void validate_for_model(const ParallelPlan& plan, const spec::ModelConfig& model, int64_t micro_batches);

// One line per rank: "rank 3 -> vgpu 0, stage 1, tp slot 1, device cpu:3" (", context shard 1" when cp > 1).
std::string describe_rank_map(const Layout& layout, const std::string& device_prefix);

}  // namespace tandem::layout
