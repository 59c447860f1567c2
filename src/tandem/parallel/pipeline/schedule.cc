// Pipeline schedules: GPipe, 1F1B and Megatron-style interleaved 1F1B, each written as warm-up / steady /
// cool-down phases over "units" (one micro-batch through one chunk), with the comm each unit needs around it.
#include "tandem/parallel/pipeline/schedule.h"

#include <algorithm>
#include <sstream>

#include "tandem/core/error.h"

namespace tandem::parallel::pipeline {

std::string action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::RecvActivation:
      return "RecvActivation";
    case ActionKind::Forward:
      return "Forward";
    case ActionKind::SendActivation:
      return "SendActivation";
    case ActionKind::RecvGradient:
      return "RecvGradient";
    case ActionKind::Backward:
      return "Backward";
    case ActionKind::SendGradient:
      return "SendGradient";
  }
  TANDEM_CHECK(false, "unhandled ActionKind ", static_cast<int>(kind));
}

std::string to_string(const Action& action) {
  std::ostringstream os;
  os << action_kind_name(action.kind) << " mb " << action.micro_batch << " chunk " << action.chunk;
  if (action.kind == ActionKind::RecvActivation || action.kind == ActionKind::RecvGradient) {
    os << " from rank " << action.peer;
  } else if (action.kind == ActionKind::SendActivation || action.kind == ActionKind::SendGradient) {
    os << " to rank " << action.peer;
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Action& action) { return os << to_string(action); }

void validate_spec(ScheduleKind kind, const ScheduleSpec& spec) {
  if (spec.stages < 1) TANDEM_FAIL("pipeline stages pp must be at least 1, got ", spec.stages);
  if (spec.micro_batches < 1) {
    TANDEM_FAIL("micro-batches (gradient_accumulation_steps) m must be at least 1, got ", spec.micro_batches);
  }
  if (spec.virtual_stages < 1) TANDEM_FAIL("virtual stages v must be at least 1, got ", spec.virtual_stages);
  if (kind != ScheduleKind::Interleaved && spec.virtual_stages != 1) {
    TANDEM_FAIL("the ", schedule_name(kind), " schedule needs virtual stages v == 1, got v = ", spec.virtual_stages,
                "; use the interleaved schedule for v > 1");
  }
  // The interleaved order walks micro-batches in groups of pp per chunk; a partial last group would break the
  // warm-up count's guarantee. With v == 1 there are no groups (it is 1F1B), so any m works.
  if (kind == ScheduleKind::Interleaved && spec.virtual_stages >= 2 && spec.micro_batches % spec.stages != 0) {
    TANDEM_FAIL(
        "micro-batches (gradient_accumulation_steps) m must be a multiple of pipeline stages pp for the "
        "interleaved schedule, got m = ",
        spec.micro_batches, ", pp = ", spec.stages);
  }
}

int global_stage(int rank, int chunk, int pp) { return chunk * pp + rank; }

namespace {

// Appends one rank's actions. Each compute action is wrapped in exactly the comm it needs: the Recv right before
// it (the latest point, so a rank never waits on data it does not yet need; sends are buffered, so this is the
// least constraining placement) and the Send right after it (the earliest point, so the peer waits least).
class RankBuilder {
 public:
  RankBuilder(int rank, const ScheduleSpec& spec)
      : rank_(rank), pp_(spec.stages), last_stage_(spec.stages * spec.virtual_stages - 1) {}

  void forward(int mb, int chunk) {
    const int s = global_stage(rank_, chunk, pp_);
    if (s > 0) comm(ActionKind::RecvActivation, mb, chunk, s - 1);
    actions_.push_back({ActionKind::Forward, mb, chunk, -1});
    if (s < last_stage_) comm(ActionKind::SendActivation, mb, chunk, s + 1);
  }

  // The last stage computes the loss inside its Forward, so its Backward needs no incoming gradient.
  void backward(int mb, int chunk) {
    const int s = global_stage(rank_, chunk, pp_);
    if (s < last_stage_) comm(ActionKind::RecvGradient, mb, chunk, s + 1);
    actions_.push_back({ActionKind::Backward, mb, chunk, -1});
    if (s > 0) comm(ActionKind::SendGradient, mb, chunk, s - 1);
  }

  std::vector<Action> take() { return std::move(actions_); }

 private:
  // A neighbouring stage on this same rank (pp == 1) is a local hand-off: no comm action.
  void comm(ActionKind kind, int mb, int chunk, int other_stage) {
    const int peer = stage_rank(other_stage, pp_);
    if (peer != rank_) actions_.push_back({kind, mb, chunk, peer});
  }

  int rank_;
  int pp_;
  int last_stage_;
  std::vector<Action> actions_;
};

struct Unit {
  int micro_batch;
  int chunk;
};

// The 1F1B template shared by 1F1B (v == 1) and interleaved (v >= 2) over `total` units per rank:
//   warm-up:   `warmup` forwards, filling the pipeline below this rank;
//   steady:    one forward then one backward, so live activations stay at warmup + 1 at most;
//   cool-down: the remaining backwards, draining the pipeline.
// Backward unit k is the k-th to finish, i.e. backwards follow the forward order.
template <class FwdUnit, class BwdUnit>
std::vector<Action> one_f_one_b_phases(RankBuilder builder, int total, int warmup, FwdUnit fwd_unit, BwdUnit bwd_unit) {
  for (int k = 0; k < warmup; ++k) builder.forward(fwd_unit(k).micro_batch, fwd_unit(k).chunk);
  for (int k = 0; k < total - warmup; ++k) {
    builder.forward(fwd_unit(warmup + k).micro_batch, fwd_unit(warmup + k).chunk);
    builder.backward(bwd_unit(k).micro_batch, bwd_unit(k).chunk);
  }
  for (int k = total - warmup; k < total; ++k) builder.backward(bwd_unit(k).micro_batch, bwd_unit(k).chunk);
  return builder.take();
}

std::vector<Action> gpipe_rank(int rank, const ScheduleSpec& spec) {
  // Warm-up: every forward; no steady phase; cool-down: every backward, in forward order.
  RankBuilder builder(rank, spec);
  for (int mb = 0; mb < spec.micro_batches; ++mb) builder.forward(mb, 0);
  for (int mb = 0; mb < spec.micro_batches; ++mb) builder.backward(mb, 0);
  return builder.take();
}

// Rank r's first backward needs the gradient of micro-batch 0 from the last stage, pp - r - 1 hops away; the
// forwards it runs before that are the ones it can overlap with micro-batch 0's trip down the pipeline.
int one_f_one_b_warmup(int rank, const ScheduleSpec& spec) {
  return std::min(spec.micro_batches, spec.stages - rank - 1);
}

std::vector<Action> one_f_one_b_rank(int rank, const ScheduleSpec& spec) {
  const auto unit = [](int k) { return Unit{k, 0}; };
  return one_f_one_b_phases(RankBuilder(rank, spec), spec.micro_batches, one_f_one_b_warmup(rank, spec), unit, unit);
}

// Interleaved warm-up: count in slots of one forward, one hop per slot. Units run in groups of pp (below), so rank
// r runs its forward unit k at slot k + r with no waiting: chunk c+1 of a micro-batch wraps from rank pp-1 back to
// rank 0 exactly when rank 0 has finished the group's pp units of chunk c. Rank r's first backward is micro-batch 0
// through its last chunk, whose gradient starts on the last rank after that rank's unit (v-1)*pp (slot
// (v-1)*pp + pp - 1) and needs pp - r - 1 hops back. Rank r fills the slots until then with forwards:
// (v-1)*pp + 2*(pp - r - 1) of them. That is Megatron's warm-up count; fewer would idle rank r while micro-batch 0
// makes its round trip, more would only hold more activations.
int interleaved_warmup(int rank, const ScheduleSpec& spec) {
  const int pp = spec.stages, v = spec.virtual_stages;
  return std::min(spec.micro_batches * v, 2 * (pp - rank - 1) + (v - 1) * pp);
}

std::vector<Action> interleaved_rank(int rank, const ScheduleSpec& spec) {
  const int pp = spec.stages, v = spec.virtual_stages;
  // Units run in groups of pp micro-batches: micro-batches g*pp..g*pp+pp-1 through chunk 0, then the same ones
  // through chunk 1, ... so each chunk's outputs come back (via the ring of ranks) just as this rank needs them.
  // Backwards visit the chunks of a group in reverse: the gradient enters at the last chunk.
  const auto fwd_unit = [pp, v](int k) {
    const int group = k / (pp * v), i = k % (pp * v);
    return Unit{group * pp + i % pp, i / pp};
  };
  const auto bwd_unit = [pp, v](int k) {
    const int group = k / (pp * v), i = k % (pp * v);
    return Unit{group * pp + i % pp, v - 1 - i / pp};
  };
  return one_f_one_b_phases(RankBuilder(rank, spec), spec.micro_batches * v, interleaved_warmup(rank, spec), fwd_unit,
                            bwd_unit);
}

}  // namespace

std::vector<std::vector<Action>> build_schedule(ScheduleKind kind, const ScheduleSpec& spec) {
  validate_spec(kind, spec);
  std::vector<std::vector<Action>> out;
  out.reserve(spec.stages);
  for (int rank = 0; rank < spec.stages; ++rank) {
    if (kind == ScheduleKind::GPipe) {
      out.push_back(gpipe_rank(rank, spec));
    } else if (kind == ScheduleKind::OneFOneB || spec.virtual_stages == 1) {
      out.push_back(one_f_one_b_rank(rank, spec));
    } else {
      out.push_back(interleaved_rank(rank, spec));
    }
  }
  return out;
}

int activation_bound(ScheduleKind kind, const ScheduleSpec& spec, int rank) {
  validate_spec(kind, spec);
  TANDEM_CHECK(rank >= 0 && rank < spec.stages, "rank ", rank, " outside 0..", spec.stages - 1);
  // Each bound is the schedule's warm-up count plus the one forward the first steady iteration runs before its
  // backward, capped by the rank's total number of units.
  if (kind == ScheduleKind::GPipe) return spec.micro_batches;
  if (kind == ScheduleKind::OneFOneB || spec.virtual_stages == 1) {
    return std::min(spec.micro_batches, one_f_one_b_warmup(rank, spec) + 1);
  }
  return std::min(spec.micro_batches * spec.virtual_stages, interleaved_warmup(rank, spec) + 1);
}

std::string describe(const std::vector<std::vector<Action>>& schedule) {
  bool chunked = false;
  for (const auto& rank_actions : schedule) {
    for (const Action& a : rank_actions) chunked = chunked || a.chunk != 0;
  }
  std::ostringstream os;
  for (size_t rank = 0; rank < schedule.size(); ++rank) {
    os << "rank " << rank << ":";
    for (const Action& a : schedule[rank]) {
      if (a.kind != ActionKind::Forward && a.kind != ActionKind::Backward) continue;
      os << ' ' << (a.kind == ActionKind::Forward ? 'F' : 'B') << a.micro_batch;
      if (chunked) os << '.' << a.chunk;
    }
    os << '\n';
  }
  return os.str();
}

}  // namespace tandem::parallel::pipeline
