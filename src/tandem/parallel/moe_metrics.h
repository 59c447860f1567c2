// A training step's mixture-of-experts metrics from every rank's balance sums, one device's figures in any layout.
#pragma once

#include <memory>
#include <vector>

#include "tandem/core/device_interface.h"
#include "tandem/layout/groups.h"
#include "tandem/nn/batch.h"

namespace tandem::parallel {

struct MoeMetrics {
  // The load-balancing loss unweighted, the mean over the step's micro-batches (each replica's own); the most-chosen
  // expert's choices over the mean expert's, summed over the MoE layers and the whole global batch (1: balanced); and
  // the same per MoE layer, in model order.
  double balance_loss = 0, max_load = 0;
  std::vector<double> layer_max_load;  // (L)
};

// `balances`: this rank's sums of the step's micro-batches, by micro-batch index, each with its per-layer tables (L, E)
// of the layers this rank holds (the other rows zero). Summed over the world: the pipeline's stages add their layers,
// the cp shards their tokens; each tp slot saw every token of its shard, so slot 0 alone counts; the dp replicas (with
// the expert-parallel slots among them) keep their own micro-batches apart, as one device keeps the step's. The counts
// travel in f32: exact up to 2^24 choices of one expert in one layer per step. Collective over groups.world.
MoeMetrics moe_metrics(const std::vector<std::shared_ptr<const nn::MoeBalance>>& balances, layout::Groups& groups,
                       Device& device);

}  // namespace tandem::parallel
