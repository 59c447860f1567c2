// Pipeline schedule simulator: runs every rank's action list with the executor's semantics (buffered sends,
// blocking recvs) and checks matching, dependencies, deadlock freedom and the activation bound; also times it.
#pragma once

#include <string>
#include <vector>

#include "tandem/parallel/pipeline/schedule.h"

namespace tandem::parallel::pipeline {

struct SimulationReport {
  bool ok;
  std::string error;                       // empty when ok; otherwise the first problem found, naming ranks
  std::vector<int> peak_live_activations;  // per rank (up to the failure when !ok)
  int steps;                               // makespan in time units: Forward 1, Backward 2, comm 0
  // Idle share of the makespan: 1 - (busy time of a rank) / steps; every rank is busy 3 * m * v units.
  // A chunk holds 1/v of a rank's layers, so `steps` of schedules with different v are not comparable
  // directly; the bubble fraction is.
  double bubble_fraction;
};

// Executes all ranks' lists: a rank advances while its next action can run; a Send completes at once, a Recv
// waits for the matching Send (matched by kind, micro-batch and stage). Reports (ok == false, error) when:
// an action is malformed (range, wrong peer, comm with itself); a Forward / Backward runs before its input
// (Recv, or the same rank's neighbouring chunk when pp == 1) or a Backward before its Forward; a send is
// duplicated or a Send precedes its compute; a rank's live activations exceed activation_bound; no rank can
// advance while some have actions left ("deadlock: rank 1 stuck at RecvGradient mb 3 chunk 0 from rank 2; ...");
// at the end, a (micro-batch, chunk) is not forwarded and backwarded exactly once per rank, or a send is never
// received. Throws Error when the spec itself is invalid for the kind.
SimulationReport simulate(ScheduleKind kind, const ScheduleSpec& spec,
                          const std::vector<std::vector<Action>>& schedule);

}  // namespace tandem::parallel::pipeline
