// Pipeline schedules: exact small schedules, validation, a simulator sweep over (kind, pp, m, v), the simulator
// catching broken schedules, and the makespan / bubble comparison between schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/parallel/pipeline/schedule.h"
#include "tandem/parallel/pipeline/simulator.h"

namespace tandem::parallel::pipeline {
namespace {

using Schedule = std::vector<std::vector<Action>>;

Action fwd(int mb, int c = 0) { return {ActionKind::Forward, mb, c, -1}; }
Action bwd(int mb, int c = 0) { return {ActionKind::Backward, mb, c, -1}; }
Action recv_act(int mb, int c, int peer) { return {ActionKind::RecvActivation, mb, c, peer}; }
Action send_act(int mb, int c, int peer) { return {ActionKind::SendActivation, mb, c, peer}; }
Action recv_grad(int mb, int c, int peer) { return {ActionKind::RecvGradient, mb, c, peer}; }
Action send_grad(int mb, int c, int peer) { return {ActionKind::SendGradient, mb, c, peer}; }

// Runs `fn`, expecting an Error whose message contains `needle`.
template <class Fn>
void expect_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an Error containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

void expect_sim_error(ScheduleKind kind, ScheduleSpec spec, const Schedule& schedule, const std::string& error) {
  const SimulationReport report = simulate(kind, spec, schedule);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.error, error);
}

TEST(ScheduleNames, RoundTripAndUnknownListsValidNames) {
  for (auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved}) {
    EXPECT_EQ(schedule_from_name(schedule_name(kind)), kind);
  }
  EXPECT_EQ(schedule_name(ScheduleKind::OneFOneB), "1f1b");
  expect_error([] { schedule_from_name("zero-bubble"); }, "is not one of gpipe, 1f1b, interleaved");
}

TEST(ScheduleSpec, InvalidSpecsThrowWithTheReason) {
  expect_error([] { build_schedule(ScheduleKind::GPipe, {0, 4, 1}); }, "pipeline stages pp must be at least 1");
  expect_error(
      [] {
        build_schedule(ScheduleKind::OneFOneB, {2, 0, 1});
      },
      "micro-batches (gradient_accumulation_steps) m must be at least 1, got 0");
  expect_error([] { build_schedule(ScheduleKind::Interleaved, {2, 4, 0}); }, "virtual stages v must be at least 1");
  expect_error(
      [] {
        build_schedule(ScheduleKind::GPipe, {2, 4, 2});
      },
      "the gpipe schedule needs virtual stages v == 1");
  expect_error([] { build_schedule(ScheduleKind::OneFOneB, {2, 4, 2}); }, "the 1f1b schedule needs virtual stages");
  expect_error(
      [] {
        build_schedule(ScheduleKind::Interleaved, {4, 6, 2});
      },
      "micro-batches (gradient_accumulation_steps) m must be a multiple of pipeline stages pp for the "
      "interleaved schedule, got m = 6, pp = 4");
  expect_error([] { activation_bound(ScheduleKind::Interleaved, {4, 6, 2}, 0); }, "must be a multiple");
  expect_error([] { simulate(ScheduleKind::OneFOneB, {2, 4, 3}, {}); }, "needs virtual stages v == 1");
  // v == 1 interleaved is exactly 1F1B, so it needs no m % pp.
  EXPECT_EQ(build_schedule(ScheduleKind::Interleaved, {4, 6, 1}), build_schedule(ScheduleKind::OneFOneB, {4, 6, 1}));
}

TEST(ScheduleSpec, GlobalStageIsMegatronInterleaved) {
  EXPECT_EQ(global_stage(0, 0, 4), 0);
  EXPECT_EQ(global_stage(3, 0, 4), 3);
  EXPECT_EQ(global_stage(0, 1, 4), 4);
  EXPECT_EQ(global_stage(1, 2, 4), 9);
  EXPECT_EQ(stage_rank(9, 4), 1);
  EXPECT_EQ(stage_chunk(9, 4), 2);
}

TEST(ScheduleExact, GPipeTwoStagesFourMicroBatches) {
  const Schedule expected = {
      {fwd(0), send_act(0, 0, 1), fwd(1), send_act(1, 0, 1), fwd(2), send_act(2, 0, 1), fwd(3), send_act(3, 0, 1),
       recv_grad(0, 0, 1), bwd(0), recv_grad(1, 0, 1), bwd(1), recv_grad(2, 0, 1), bwd(2), recv_grad(3, 0, 1), bwd(3)},
      {recv_act(0, 0, 0), fwd(0), recv_act(1, 0, 0), fwd(1), recv_act(2, 0, 0), fwd(2), recv_act(3, 0, 0), fwd(3),
       bwd(0), send_grad(0, 0, 0), bwd(1), send_grad(1, 0, 0), bwd(2), send_grad(2, 0, 0), bwd(3), send_grad(3, 0, 0)},
  };
  EXPECT_EQ(build_schedule(ScheduleKind::GPipe, {2, 4, 1}), expected);
}

TEST(ScheduleExact, OneFOneBTwoStagesFourMicroBatches) {
  const Schedule expected = {
      // warm-up: 1 forward; steady: F then B; cool-down: the last backward.
      {fwd(0), send_act(0, 0, 1),                              //
       fwd(1), send_act(1, 0, 1), recv_grad(0, 0, 1), bwd(0),  //
       fwd(2), send_act(2, 0, 1), recv_grad(1, 0, 1), bwd(1),  //
       fwd(3), send_act(3, 0, 1), recv_grad(2, 0, 1), bwd(2),  //
       recv_grad(3, 0, 1), bwd(3)},
      // last stage: no warm-up, strict F/B alternation.
      {recv_act(0, 0, 0), fwd(0), bwd(0), send_grad(0, 0, 0),  //
       recv_act(1, 0, 0), fwd(1), bwd(1), send_grad(1, 0, 0),  //
       recv_act(2, 0, 0), fwd(2), bwd(2), send_grad(2, 0, 0),  //
       recv_act(3, 0, 0), fwd(3), bwd(3), send_grad(3, 0, 0)},
  };
  EXPECT_EQ(build_schedule(ScheduleKind::OneFOneB, {2, 4, 1}), expected);
  EXPECT_EQ(describe(expected), "rank 0: F0 F1 B0 F2 B1 F3 B2 B3\nrank 1: F0 B0 F1 B1 F2 B2 F3 B3\n");
}

TEST(ScheduleExact, InterleavedTwoStagesFourMicroBatchesTwoChunks) {
  // Stages: 0 = rank 0 chunk 0, 1 = rank 1 chunk 0, 2 = rank 0 chunk 1, 3 = rank 1 chunk 1.
  // Forward unit order per rank: (0,c0) (1,c0) (0,c1) (1,c1) (2,c0) (3,c0) (2,c1) (3,c1); backward order visits the
  // chunks of each group in reverse. Warm-up: rank 0 = 2*1 + 1*2 = 4, rank 1 = 0 + 1*2 = 2.
  const Schedule expected = {
      {fwd(0, 0),          send_act(0, 0, 1),                                                              // warm-up
       fwd(1, 0),          send_act(1, 0, 1),                                                              //
       recv_act(0, 1, 1),  fwd(0, 1),         send_act(0, 1, 1),                                           //
       recv_act(1, 1, 1),  fwd(1, 1),         send_act(1, 1, 1),                                           //
       fwd(2, 0),          send_act(2, 0, 1), recv_grad(0, 1, 1), bwd(0, 1),          send_grad(0, 1, 1),  // steady
       fwd(3, 0),          send_act(3, 0, 1), recv_grad(1, 1, 1), bwd(1, 1),          send_grad(1, 1, 1),  //
       recv_act(2, 1, 1),  fwd(2, 1),         send_act(2, 1, 1),  recv_grad(0, 0, 1), bwd(0, 0),           //
       recv_act(3, 1, 1),  fwd(3, 1),         send_act(3, 1, 1),  recv_grad(1, 0, 1), bwd(1, 0),           //
       recv_grad(2, 1, 1), bwd(2, 1),         send_grad(2, 1, 1),                                          // cool-down
       recv_grad(3, 1, 1), bwd(3, 1),         send_grad(3, 1, 1),                                          //
       recv_grad(2, 0, 1), bwd(2, 0),                                                                      //
       recv_grad(3, 0, 1), bwd(3, 0)},
      {recv_act(0, 0, 0),  fwd(0, 0), send_act(0, 0, 0),                       // warm-up
       recv_act(1, 0, 0),  fwd(1, 0), send_act(1, 0, 0),                       //
       recv_act(0, 1, 0),  fwd(0, 1), bwd(0, 1),          send_grad(0, 1, 0),  // steady
       recv_act(1, 1, 0),  fwd(1, 1), bwd(1, 1),          send_grad(1, 1, 0),  //
       recv_act(2, 0, 0),  fwd(2, 0), send_act(2, 0, 0),  recv_grad(0, 0, 0), bwd(0, 0), send_grad(0, 0, 0),
       recv_act(3, 0, 0),  fwd(3, 0), send_act(3, 0, 0),  recv_grad(1, 0, 0), bwd(1, 0), send_grad(1, 0, 0),
       recv_act(2, 1, 0),  fwd(2, 1), bwd(2, 1),          send_grad(2, 1, 0),  //
       recv_act(3, 1, 0),  fwd(3, 1), bwd(3, 1),          send_grad(3, 1, 0),  //
       recv_grad(2, 0, 0), bwd(2, 0), send_grad(2, 0, 0),                      // cool-down
       recv_grad(3, 0, 0), bwd(3, 0), send_grad(3, 0, 0)},
  };
  const Schedule got = build_schedule(ScheduleKind::Interleaved, {2, 4, 2});
  EXPECT_EQ(got, expected);
  EXPECT_EQ(describe(got),
            "rank 0: F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0\n"
            "rank 1: F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0\n");
}

TEST(ScheduleExact, SingleStageHasNoComm) {
  EXPECT_EQ(build_schedule(ScheduleKind::OneFOneB, {1, 3, 1}),
            (Schedule{{fwd(0), bwd(0), fwd(1), bwd(1), fwd(2), bwd(2)}}));
  EXPECT_EQ(build_schedule(ScheduleKind::GPipe, {1, 3, 1}),
            (Schedule{{fwd(0), fwd(1), fwd(2), bwd(0), bwd(1), bwd(2)}}));
  // pp == 1, v == 2: consecutive chunks are local hand-offs, so only compute actions; warm-up = (v-1)*pp = 1.
  EXPECT_EQ(build_schedule(ScheduleKind::Interleaved, {1, 2, 2}),
            (Schedule{{fwd(0, 0), fwd(0, 1), bwd(0, 1), fwd(1, 0), bwd(0, 0), fwd(1, 1), bwd(1, 1), bwd(1, 0)}}));
}

TEST(ScheduleBound, DocumentedValues) {
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(activation_bound(ScheduleKind::GPipe, {4, 8, 1}, r), 8);
    EXPECT_EQ(activation_bound(ScheduleKind::OneFOneB, {4, 8, 1}, r), 4 - r);
    EXPECT_EQ(activation_bound(ScheduleKind::OneFOneB, {4, 2, 1}, r), std::min(2, 4 - r));
    EXPECT_EQ(activation_bound(ScheduleKind::Interleaved, {4, 8, 1}, r), 4 - r);
  }
  // min(m*v, 2*(pp-r-1) + (v-1)*pp + 1)
  EXPECT_EQ(activation_bound(ScheduleKind::Interleaved, {4, 8, 2}, 0), 11);
  EXPECT_EQ(activation_bound(ScheduleKind::Interleaved, {4, 8, 2}, 3), 5);
  EXPECT_EQ(activation_bound(ScheduleKind::Interleaved, {4, 4, 3}, 0), 12);  // capped at m*v
}

// Every valid (kind, pp, m, v) runs to completion in the simulator and reaches exactly its activation bound.
TEST(ScheduleSweep, AllValidSpecsSimulateCleanly) {
  int simulated = 0;
  for (auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved}) {
    for (int pp : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 4, 5, 8, 16}) {
        for (int v : {1, 2, 3}) {
          if (kind != ScheduleKind::Interleaved && v != 1) continue;
          if (kind == ScheduleKind::Interleaved && v >= 2 && m % pp != 0) continue;
          SCOPED_TRACE(schedule_name(kind) + " pp=" + std::to_string(pp) + " m=" + std::to_string(m) +
                       " v=" + std::to_string(v));
          const ScheduleSpec spec{pp, m, v};
          const Schedule schedule = build_schedule(kind, spec);
          ASSERT_EQ(schedule.size(), static_cast<size_t>(pp));
          for (int r = 0; r < pp; ++r) {
            for (const Action& a : schedule[r]) EXPECT_NE(a.peer, r) << a;
          }
          const SimulationReport report = simulate(kind, spec, schedule);
          ASSERT_TRUE(report.ok) << report.error << "\n" << describe(schedule);
          ASSERT_EQ(report.peak_live_activations.size(), static_cast<size_t>(pp));
          for (int r = 0; r < pp; ++r) {
            EXPECT_EQ(report.peak_live_activations[r], activation_bound(kind, spec, r)) << "rank " << r;
            if (kind == ScheduleKind::GPipe) {
              EXPECT_EQ(report.peak_live_activations[r], m);
            }
          }
          // Every rank computes 3*m*v units; the pipeline can never finish before one rank's share is done.
          EXPECT_GE(report.steps, 3 * m * v);
          ++simulated;
        }
      }
    }
  }
  EXPECT_EQ(simulated, 3 * 35 + 2 * (7 + 4 + 1 + 3 + 2));  // v >= 2 needs m % pp == 0
}

// NCCL pairs a rank's sends to a peer with the peer's receives in posting order, per communicator, and the
// pipeline puts activations and gradients on separate channels. So for every kind and ordered pair of ranks
// the receiver must post its receives in the order the sender posts its sends.
TEST(ScheduleSweep, ReceivesFollowTheSendOrderPerChannel) {
  for (auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved})
    for (int pp : {2, 3, 4, 8})
      for (int m : {1, 2, 4, 8, 16})
        for (int v : {1, 2, 3}) {
          if ((kind != ScheduleKind::Interleaved && v != 1) || (kind == ScheduleKind::Interleaved && m % pp != 0))
            continue;
          SCOPED_TRACE(schedule_name(kind) + " pp=" + std::to_string(pp) + " m=" + std::to_string(m) +
                       " v=" + std::to_string(v));
          const Schedule schedule = build_schedule(kind, {pp, m, v});
          // (kind, src, dst) -> the micro-batch and receiving stage of each message, in posting order.
          std::map<std::tuple<int, int, int>, std::vector<std::pair<int, int>>> sent, received;
          for (int r = 0; r < pp; ++r)
            for (const Action& a : schedule[r]) {
              const int stage = global_stage(r, a.chunk, pp);
              if (a.kind == ActionKind::SendActivation) sent[{0, r, a.peer}].push_back({a.micro_batch, stage + 1});
              if (a.kind == ActionKind::SendGradient) sent[{1, r, a.peer}].push_back({a.micro_batch, stage - 1});
              if (a.kind == ActionKind::RecvActivation) received[{0, a.peer, r}].push_back({a.micro_batch, stage});
              if (a.kind == ActionKind::RecvGradient) received[{1, a.peer, r}].push_back({a.micro_batch, stage});
            }
          EXPECT_EQ(sent, received);
        }
}

// A correct pp=2, m=4 1F1B schedule to break by hand.
Schedule good_1f1b() { return build_schedule(ScheduleKind::OneFOneB, {2, 4, 1}); }

void erase_action(std::vector<Action>& actions, const Action& a) {
  auto it = std::find(actions.begin(), actions.end(), a);
  ASSERT_NE(it, actions.end()) << a;
  actions.erase(it);
}

TEST(Simulator, CatchesMissingRecv) {
  Schedule s = good_1f1b();
  erase_action(s[1], recv_act(2, 0, 0));
  expect_sim_error(ScheduleKind::OneFOneB, {2, 4, 1}, s,
                   "rank 1: Forward mb 2 chunk 0 (stage 1) runs before its RecvActivation mb 2 chunk 0 from rank 0");
}

TEST(Simulator, CatchesDeadlockWhenBothRanksReceiveFirst) {
  // Rank 0 waits for a gradient before sending its activation; rank 1 waits for that activation.
  const Schedule s = {{recv_grad(0, 0, 1), fwd(0), send_act(0, 0, 1), bwd(0)},
                      {recv_act(0, 0, 0), fwd(0), bwd(0), send_grad(0, 0, 0)}};
  expect_sim_error(ScheduleKind::OneFOneB, {2, 1, 1}, s,
                   "deadlock: rank 0 stuck at RecvGradient mb 0 chunk 0 from rank 1; rank 1 stuck at RecvActivation "
                   "mb 0 chunk 0 from rank 0");
}

TEST(Simulator, CatchesForwardWithoutBackward) {
  Schedule s = good_1f1b();
  erase_action(s[0], bwd(3));
  expect_sim_error(ScheduleKind::OneFOneB, {2, 4, 1}, s, "rank 0 runs Forward mb 3 chunk 0 but never its Backward");
}

TEST(Simulator, CatchesLiveActivationsOverTheBound) {
  // GPipe's lists judged against 1F1B's bound: rank 0 may hold only 2.
  expect_sim_error(ScheduleKind::OneFOneB, {2, 4, 1}, build_schedule(ScheduleKind::GPipe, {2, 4, 1}),
                   "rank 0 holds 3 live activations after Forward mb 2 chunk 0, over the 1f1b bound of 2");
}

TEST(Simulator, CatchesMalformedComm) {
  Schedule self_send = good_1f1b();
  self_send[0][1].peer = 0;
  expect_sim_error(ScheduleKind::OneFOneB, {2, 4, 1}, self_send,
                   "rank 0: SendActivation mb 0 chunk 0 to rank 0 talks to itself; hand-offs between stages on the "
                   "same rank have no comm action");

  Schedule wrong_peer = build_schedule(ScheduleKind::OneFOneB, {3, 2, 1});
  wrong_peer[0][1].peer = 2;
  expect_sim_error(ScheduleKind::OneFOneB, {3, 2, 1}, wrong_peer,
                   "rank 0: SendActivation mb 0 chunk 0 to rank 2 has the wrong peer: stage 1 lives on rank 1");

  // pp == 1, v == 2: chunk 0 -> chunk 1 is local, so a comm action for it is an error.
  Schedule local_comm = build_schedule(ScheduleKind::Interleaved, {1, 1, 2});
  local_comm[0].insert(local_comm[0].begin() + 1, send_act(0, 0, -1));
  expect_sim_error(ScheduleKind::Interleaved, {1, 1, 2}, local_comm,
                   "rank 0: SendActivation mb 0 chunk 0 to rank -1: stage 1 is on this rank too, so the hand-off has "
                   "no comm action");

  Schedule duplicate = good_1f1b();
  duplicate[0].insert(duplicate[0].begin() + 2, send_act(0, 0, 1));
  expect_sim_error(ScheduleKind::OneFOneB, {2, 4, 1}, duplicate,
                   "rank 0: duplicate SendActivation mb 0 chunk 0 to rank 1");

  Schedule no_next_stage = good_1f1b();
  no_next_stage[1].push_back(send_act(0, 0, 0));
  expect_sim_error(ScheduleKind::OneFOneB, {2, 4, 1}, no_next_stage,
                   "rank 1: SendActivation mb 0 chunk 0 to rank 0 on stage 1, which has no next stage");

  Schedule backward_first = build_schedule(ScheduleKind::GPipe, {1, 2, 1});
  std::swap(backward_first[0][0], backward_first[0][2]);
  expect_sim_error(ScheduleKind::GPipe, {1, 2, 1}, backward_first,
                   "rank 0: Backward mb 0 chunk 0 runs before its Forward");
}

TEST(Simulator, CatchesUnreceivedSend) {
  // pp=2, m=1: rank 1 drops its RecvActivation and computes nothing; rank 0 then never gets a gradient either.
  const Schedule s = {{fwd(0), send_act(0, 0, 1), bwd(0)}, {}};
  expect_sim_error(ScheduleKind::GPipe, {2, 1, 1}, s,
                   "rank 0: Backward mb 0 chunk 0 (stage 0) runs before its "
                   "RecvGradient mb 0 chunk 0 from rank 1");
  const Schedule only_send = {{fwd(0), send_act(0, 0, 1)}, {}};
  const SimulationReport report = simulate(ScheduleKind::GPipe, {2, 1, 1}, only_send);
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.error, "rank 0 runs Forward mb 0 chunk 0 but never its Backward");
}

TEST(Simulator, ReportsWrongRankCount) {
  const SimulationReport report = simulate(ScheduleKind::GPipe, {2, 1, 1}, Schedule(3));
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.error, "schedule has 3 ranks, the spec has pp = 2");
}

TEST(ScheduleMakespan, OneFOneBMatchesGPipeAndInterleavingShrinksTheBubble) {
  const ScheduleSpec flat{4, 8, 1}, interleaved{4, 8, 2};
  const SimulationReport gpipe = simulate(ScheduleKind::GPipe, flat, build_schedule(ScheduleKind::GPipe, flat));
  const SimulationReport one_f_one_b =
      simulate(ScheduleKind::OneFOneB, flat, build_schedule(ScheduleKind::OneFOneB, flat));
  const SimulationReport inter =
      simulate(ScheduleKind::Interleaved, interleaved, build_schedule(ScheduleKind::Interleaved, interleaved));
  ASSERT_TRUE(gpipe.ok && one_f_one_b.ok && inter.ok);
  // GPipe: (m + pp - 1) forward slots and as many backward slots of twice the cost.
  EXPECT_EQ(gpipe.steps, 3 * (8 + 4 - 1));
  EXPECT_EQ(one_f_one_b.steps, gpipe.steps);
  EXPECT_DOUBLE_EQ(one_f_one_b.bubble_fraction, gpipe.bubble_fraction);
  // A chunk is half a stage, so interleaved steps count half-size units: compare in whole-stage units.
  EXPECT_LT(inter.steps, 2 * one_f_one_b.steps);
  EXPECT_EQ(inter.steps, 3 * 8 * 2 + 3 * (4 - 1));  // the fill/drain bubble shrinks to 1/v of 1F1B's
  EXPECT_LT(inter.bubble_fraction, one_f_one_b.bubble_fraction);
}

}  // namespace
}  // namespace tandem::parallel::pipeline
