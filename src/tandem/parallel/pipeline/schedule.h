// Pipeline schedules: for each pipeline rank, the ordered forward / backward / send / recv actions of one step,
// as pure functions of (kind, pp, m, v), and the activation-memory bound each schedule guarantees.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "tandem/spec/schedule.h"

namespace tandem::parallel::pipeline {

// The kind is the run's one schedule enum (spec/schedule.h), with its names.
using spec::schedule_from_name;
using spec::schedule_name;
using spec::ScheduleKind;

enum class ActionKind { RecvActivation, Forward, SendActivation, RecvGradient, Backward, SendGradient };
std::string action_kind_name(ActionKind kind);  // "RecvActivation", ...

struct Action {
  ActionKind kind;
  int micro_batch;  // 0..m-1
  int chunk;        // this rank's chunk (virtual stage slot) 0..v-1
  int peer;         // pipeline rank on the other side of a send/recv; -1 for Forward/Backward
  bool operator==(const Action&) const = default;
};

// "Forward mb 2 chunk 0", "RecvGradient mb 3 chunk 0 from rank 2", "SendActivation mb 1 chunk 1 to rank 0".
std::string to_string(const Action& action);
std::ostream& operator<<(std::ostream& os, const Action& action);  // so test failures print readable actions

struct ScheduleSpec {
  int stages;          // pp: pipeline ranks
  int micro_batches;   // m: micro-batches per step (gradient accumulation steps)
  int virtual_stages;  // v: chunks per rank; 1 unless interleaved
};

// Throws Error when the spec cannot be run by the kind: pp, m, v < 1; v != 1 for GPipe / 1F1B;
// m not a multiple of pp for Interleaved with v >= 2 (with v == 1 Interleaved is plain 1F1B, so any m works).
void validate_spec(ScheduleKind kind, const ScheduleSpec& spec);

// Megatron's interleaved assignment: rank r holds chunks c = 0..v-1 at global stages c * pp + r.
int global_stage(int rank, int chunk, int pp);
inline int stage_rank(int stage, int pp) { return stage % pp; }
inline int stage_chunk(int stage, int pp) { return stage / pp; }

// [pp][actions]. Communication with a stage on the same rank (only possible when pp == 1) is omitted: the
// executor hands the tensor over directly.
std::vector<std::vector<Action>> build_schedule(ScheduleKind kind, const ScheduleSpec& spec);

// The most forward activations (forward done, backward not yet) rank `rank` holds at once under the schedule:
//   GPipe: m (all forwards before any backward).
//   1F1B: min(m, pp - rank): pp - rank - 1 warm-up forwards, then one more before each backward.
//   Interleaved (v >= 2): min(m * v, W + 1) with W = min(m * v, 2 * (pp - rank - 1) + (v - 1) * pp) warm-up
//   forwards; see schedule.cc for why W is what it is. The schedules reach these bounds exactly.
int activation_bound(ScheduleKind kind, const ScheduleSpec& spec, int rank);

// One line per rank, "rank 0: F0 F1 B0 F2 B1 ...", chunk suffixes when any chunk > 0 ("F0.1"), comm omitted.
std::string describe(const std::vector<std::vector<Action>>& schedule);

}  // namespace tandem::parallel::pipeline
