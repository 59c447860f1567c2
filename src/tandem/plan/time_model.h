// TimeModel: one training step's predicted time and throughput for a setup, from the work the engine recorded
// when the memory model ran it on the counting device (each action's FLOPs, bytes, op count and collective bus
// bytes, memory_model.h), priced with Rates, and the pipeline bubble of its schedule.
//
// Overlap: every collective and pipeline receive in Tandem blocks the rank that issues it (tp sums inside layers,
// ZeRO gathers in the layer hooks, the end-of-step gradient reduction after the pipeline drains), so compute and
// communication add up. Offload's copies and the host's AdamW do not block the device (docs/offload.md, "Overlap"):
// the gradients go down on a copy stream beside the backward, the host updates each unit on a thread of its own as
// its gradient arrives, and the weights go up on the other copy stream before the next forward uses them. With the
// update in the backward (offload_optimizer.update "in_backward"; the setup carries no gradient clipping or fp16,
// which would hold it) a step takes the longer of the device's work and that host chain (copies and AdamW), plus the
// one part nothing hides: the update and upload of the unit whose gradient comes last, the first offloaded layer,
// which the next step needs first. With the update held until the backward's end the chain starts there, and the
// next forward waits for it: it adds up as before. Copies of the checkpointed inputs alone (no offloaded optimizer)
// are added too.
#pragma once

#include "tandem/plan/memory_model.h"
#include "tandem/plan/rates.h"

namespace tandem::plan {

struct TimePrediction {
  double step_s = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;         // loss rows (tokens for a language model, samples otherwise) per second
  const char* unit = "samples/s";  // what tokens_per_s counts: "tok/s" or "samples/s"
  // Where the step goes, for the slowest pipeline rank (seconds per step).
  double compute_s = 0;    // forward, backward and recomputation: products, attention, elementwise traffic
  double bubble_s = 0;     // pipeline fill and drain: (pp - 1) / v micro-batch times
  double tp_s = 0;         // tensor-parallel all-reduces and context-parallel all-to-alls
  double pp_s = 0;         // activations and gradients between stages
  double dp_s = 0;         // ZeRO / data-parallel collectives (per layer at stages 2-3, at the end at 0-2)
  double optimizer_s = 0;  // the end of the step besides its collectives: the norm and AdamW
  double offload_s = 0;    // offload: copies between the device and host memory (in the actions and at the end)
  double host_s = 0;       // offload: the host's work (its AdamW, the gradients' sums)
  // Of offload_s + host_s, what runs beside the device's work and adds nothing to the step (0 without overlap).
  double offload_hidden_s = 0;
  double bubble_fraction = 0;  // (pp - 1) / (m + pp - 1), divided by v when interleaved
  // Model FLOPs as the project counts them: 6 N per loss row plus the model's extra (12 L d T per token for a
  // gpt); per step, and per device-second at the predicted speed.
  double model_flops_per_step = 0;
  double model_flops_per_device_s = 0;
};

// `nodes`: the world's devices split evenly over this many hosts; a group whose ranks sit on two hosts uses
// the inter-node rates.
TimePrediction predict_time(MemoryModel& memory, const MemoryPrediction& prediction, const Setup& setup,
                            const Rates& rates, int nodes = 1);

}  // namespace tandem::plan
