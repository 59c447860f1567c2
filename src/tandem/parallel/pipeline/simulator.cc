// Pipeline schedule simulator: a round-robin executor over per-rank action lists with a mailbox of buffered
// sends, per-rank dependency state, and per-rank clocks for the makespan.
#include "tandem/parallel/pipeline/simulator.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "tandem/core/error.h"

namespace tandem::parallel::pipeline {
namespace {

constexpr int kForwardCost = 1;
constexpr int kBackwardCost = 2;  // the usual backward ~ 2x forward

// The first problem found; caught in simulate() and turned into the report's error.
struct ScheduleFault {
  std::string message;
};

template <class... Args>
[[noreturn]] void fault(Args&&... args) {
  throw ScheduleFault{detail::concat(std::forward<Args>(args)...)};
}

bool is_comm(ActionKind kind) { return kind != ActionKind::Forward && kind != ActionKind::Backward; }
bool is_gradient(ActionKind kind) { return kind == ActionKind::RecvGradient || kind == ActionKind::SendGradient; }

// A buffered send. Keyed by (is gradient, micro-batch, receiving stage): the sender's stage follows from the
// receiver's, so this is the (kind, micro-batch, stage pair) matching the executor uses.
struct Message {
  int from_rank;
  Action send;
  long time;  // when the data is ready: the sender's clock at the Send
  bool received = false;
};
using MessageKey = std::tuple<bool, int, int>;

struct RankState {
  size_t next = 0;  // index of the next action to run
  long clock = 0;
  int live = 0;  // forwards done whose backward is not
  int peak = 0;
  int bound = 0;
  std::vector<char> forwarded, backwarded, got_activation, got_gradient;  // [mb * v + chunk]
};

class Simulator {
 public:
  Simulator(ScheduleKind kind, const ScheduleSpec& spec, const std::vector<std::vector<Action>>& schedule)
      : kind_(kind),
        pp_(spec.stages),
        m_(spec.micro_batches),
        v_(spec.virtual_stages),
        last_stage_(spec.stages * spec.virtual_stages - 1),
        schedule_(schedule),
        ranks_(spec.stages) {
    const size_t units = static_cast<size_t>(m_) * v_;
    for (int r = 0; r < pp_; ++r) {
      RankState& st = ranks_[r];
      st.bound = activation_bound(kind, spec, r);
      st.forwarded.assign(units, 0);
      st.backwarded.assign(units, 0);
      st.got_activation.assign(units, 0);
      st.got_gradient.assign(units, 0);
    }
  }

  // Round-robin until no rank can advance; the outcome does not depend on the visiting order because sends never
  // block and a recv, once runnable, stays runnable.
  void run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < pp_; ++r) {
        RankState& st = ranks_[r];
        while (st.next < schedule_[r].size() && try_run(r, schedule_[r][st.next])) {
          ++st.next;
          progress = true;
        }
      }
    }
    check_deadlock();
    check_complete();
  }

  void fill(SimulationReport& report) const {
    long makespan = 0;
    for (const RankState& st : ranks_) {
      report.peak_live_activations.push_back(st.peak);
      makespan = std::max(makespan, st.clock);
    }
    report.steps = static_cast<int>(makespan);
    const double busy = static_cast<double>(m_) * v_ * (kForwardCost + kBackwardCost);
    report.bubble_fraction = makespan > 0 ? 1.0 - busy / static_cast<double>(makespan) : 0.0;
  }

 private:
  size_t unit(const Action& a) const { return static_cast<size_t>(a.micro_batch) * v_ + a.chunk; }

  // Range and peer checks that do not depend on execution state.
  void check_well_formed(int r, const Action& a) const {
    if (a.micro_batch < 0 || a.micro_batch >= m_ || a.chunk < 0 || a.chunk >= v_) {
      fault("rank ", r, ": ", to_string(a), " is out of range (m = ", m_, ", v = ", v_, ")");
    }
    if (!is_comm(a.kind)) {
      if (a.peer != -1) fault("rank ", r, ": ", to_string(a), " has peer ", a.peer, "; compute actions use -1");
      return;
    }
    const int s = global_stage(r, a.chunk, pp_);
    const bool towards_next = a.kind == ActionKind::SendActivation || a.kind == ActionKind::RecvGradient;
    const int other = towards_next ? s + 1 : s - 1;
    if (other < 0 || other > last_stage_) {
      fault("rank ", r, ": ", to_string(a), " on stage ", s, ", which has no ", towards_next ? "next" : "previous",
            " stage");
    }
    if (a.peer == r) {
      fault("rank ", r, ": ", to_string(a), " talks to itself; hand-offs between stages on the same rank have no ",
            "comm action");
    }
    const int expected = stage_rank(other, pp_);
    if (expected == r) {
      fault("rank ", r, ": ", to_string(a), ": stage ", other, " is on this rank too, so the hand-off has no comm ",
            "action");
    }
    if (a.peer != expected) {
      fault("rank ", r, ": ", to_string(a), " has the wrong peer: stage ", other, " lives on rank ", expected);
    }
  }

  // Runs `a` on rank r if it can run now; false when it must wait (only a Recv waits).
  bool try_run(int r, const Action& a) {
    check_well_formed(r, a);
    RankState& st = ranks_[r];
    const size_t u = unit(a);
    const int s = global_stage(r, a.chunk, pp_);
    switch (a.kind) {
      case ActionKind::RecvActivation:
      case ActionKind::RecvGradient: {
        const bool grad = is_gradient(a.kind);
        std::vector<char>& got = grad ? st.got_gradient : st.got_activation;
        if (got[u]) fault("rank ", r, ": duplicate ", to_string(a));
        auto it = mailbox_.find(MessageKey{grad, a.micro_batch, s});
        if (it == mailbox_.end()) return false;
        it->second.received = true;
        got[u] = 1;
        st.clock = std::max(st.clock, it->second.time);
        return true;
      }
      case ActionKind::SendActivation:
      case ActionKind::SendGradient: {
        const bool grad = is_gradient(a.kind);
        if (!(grad ? st.backwarded[u] : st.forwarded[u])) {
          fault("rank ", r, ": ", to_string(a), " runs before its ", grad ? "Backward" : "Forward");
        }
        const MessageKey key{grad, a.micro_batch, grad ? s - 1 : s + 1};
        if (mailbox_.count(key)) fault("rank ", r, ": duplicate ", to_string(a));
        mailbox_.emplace(key, Message{r, a, st.clock});
        return true;
      }
      case ActionKind::Forward: {
        if (st.forwarded[u]) fault("rank ", r, ": ", to_string(a), " runs twice");
        if (s > 0) require_input(r, a, s - 1, st.got_activation, st.forwarded, ActionKind::RecvActivation);
        st.forwarded[u] = 1;
        st.clock += kForwardCost;
        st.peak = std::max(st.peak, ++st.live);
        if (st.live > st.bound) {
          fault("rank ", r, " holds ", st.live, " live activations after ", to_string(a), ", over the ",
                schedule_name(kind_), " bound of ", st.bound);
        }
        return true;
      }
      case ActionKind::Backward: {
        if (st.backwarded[u]) fault("rank ", r, ": ", to_string(a), " runs twice");
        if (!st.forwarded[u]) fault("rank ", r, ": ", to_string(a), " runs before its Forward");
        if (s < last_stage_) require_input(r, a, s + 1, st.got_gradient, st.backwarded, ActionKind::RecvGradient);
        st.backwarded[u] = 1;
        st.clock += kBackwardCost;
        --st.live;
        return true;
      }
    }
    TANDEM_CHECK(false, "unhandled ActionKind ", static_cast<int>(a.kind));
  }

  // The input of compute action `a` comes from stage `from`: received from another rank, or (pp == 1) produced by
  // this rank's own compute on that stage earlier in its list.
  void require_input(int r, const Action& a, int from, const std::vector<char>& received,
                     const std::vector<char>& local_done, ActionKind recv_kind) const {
    const int from_rank = stage_rank(from, pp_);
    if (from_rank != r) {
      if (!received[unit(a)]) {
        fault("rank ", r, ": ", to_string(a), " (stage ", global_stage(r, a.chunk, pp_), ") runs before its ",
              to_string(Action{recv_kind, a.micro_batch, a.chunk, from_rank}));
      }
      return;
    }
    const Action producer{a.kind, a.micro_batch, stage_chunk(from, pp_), -1};
    if (!local_done[unit(producer)]) {
      fault("rank ", r, ": ", to_string(a), " (stage ", global_stage(r, a.chunk, pp_), ") runs before ",
            to_string(producer), " (stage ", from, ") on the same rank");
    }
  }

  void check_deadlock() const {
    std::ostringstream stuck;
    for (int r = 0; r < pp_; ++r) {
      if (ranks_[r].next == schedule_[r].size()) continue;
      if (stuck.tellp() > 0) stuck << "; ";
      stuck << "rank " << r << " stuck at " << to_string(schedule_[r][ranks_[r].next]);
    }
    if (stuck.tellp() > 0) fault("deadlock: ", stuck.str());
  }

  void check_complete() const {
    for (int r = 0; r < pp_; ++r) {
      for (int mb = 0; mb < m_; ++mb) {
        for (int c = 0; c < v_; ++c) {
          const size_t u = static_cast<size_t>(mb) * v_ + c;
          if (!ranks_[r].forwarded[u]) fault("rank ", r, " never runs Forward mb ", mb, " chunk ", c);
          if (!ranks_[r].backwarded[u]) {
            fault("rank ", r, " runs Forward mb ", mb, " chunk ", c, " but never its Backward");
          }
        }
      }
    }
    for (const auto& [key, msg] : mailbox_) {
      if (!msg.received) {
        fault("rank ", msg.from_rank, ": ", to_string(msg.send), " is never received (no matching ",
              std::get<0>(key) ? "RecvGradient" : "RecvActivation", " on rank ", msg.send.peer, ")");
      }
    }
  }

  ScheduleKind kind_;
  int pp_, m_, v_, last_stage_;
  const std::vector<std::vector<Action>>& schedule_;
  std::vector<RankState> ranks_;
  std::map<MessageKey, Message> mailbox_;
};

}  // namespace

SimulationReport simulate(ScheduleKind kind, const ScheduleSpec& spec,
                          const std::vector<std::vector<Action>>& schedule) {
  validate_spec(kind, spec);
  SimulationReport report{true, "", {}, 0, 0.0};
  if (schedule.size() != static_cast<size_t>(spec.stages)) {
    report.ok = false;
    report.error = detail::concat("schedule has ", schedule.size(), " ranks, the spec has pp = ", spec.stages);
    return report;
  }
  Simulator sim(kind, spec, schedule);
  try {
    sim.run();
  } catch (const ScheduleFault& f) {
    report.ok = false;
    report.error = f.message;
  }
  sim.fill(report);
  return report;
}

}  // namespace tandem::parallel::pipeline
