// What one training step measured, the same on every rank: the values of its line in metrics.jsonl, its progress
// line and its monitor events.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::train {

struct StepMetrics {
  int64_t step = 0;  // 1-based: the number of updates done
  double loss = 0;   // mean over the global batch
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double step_seconds = 0;
  double tokens_per_s = 0;  // tokens (gpt) or samples (mlp) per second, whole job
  uint64_t peak_bytes = 0;  // the largest per-device peak so far
  bool skipped = false;     // fp16 overflow: no update
  double loss_scale = 1;    // fp16: the scale after this step
  bool evaluated = false;   // "eval" ran after this step
  double val_loss = 0;      // then: the mean loss over its batches, after this step's update
  double checkpoint_s = 0;  // seconds the loop was held at this step's boundary by checkpointing (0: none taken)
  bool checkpoint_writing = false;  // a checkpoint was being written in the background during this step
  // A mixture of experts' balance (parallel::StepResult::moe_*), when the step measured it.
  bool moe = false;
  double moe_balance_loss = 0, moe_max_load = 0;
  std::vector<double> moe_layer_max_load;  // (L) each MoE layer's max over mean, in model order
  std::vector<int> moe_layers;             // (L) their block numbers (model.layers.<i>)
};

}  // namespace tandem::train
