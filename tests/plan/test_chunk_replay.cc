// The planner's chunk replay (plan/chunk_replay.h) against running every chunk call: the same engine steps on a
// counting device with the replay in front of its chunk runner and without it, and both must reach the same peak,
// by purpose, in the same action with the same micro-batches held, and record the same work, while the replay runs
// the layers for only a few calls. The training path knows nothing of the replay: the planner installs it.
#include <gtest/gtest.h>

#include <string>

#include "plan/plan_test_util.h"
#include "tandem/device/counting_device.h"
#include "tandem/layout/groups.h"
#include "tandem/parallel/engine.h"
#include "tandem/plan/chunk_replay.h"

namespace tandem {
namespace {

using testing::mem_case;
using testing::MemCase;

struct Account {
  uint64_t peak = 0;
  device::Breakdown at_peak;
  int live = 0;
  std::string label;
  device::WorkLog work;
  int64_t replays = 0;
};

// One step of pipeline rank `pp_rank` (replica 0) of case `c` on a counting device, with or without the replay.
Account step(const MemCase& c, int pp_rank, bool replay) {
  const plan::PlannedModel m = testing::planned(c.model);
  const plan::Setup s = testing::case_setup(c);
  const layout::Layout& l = s.plan.layout;
  layout::Groups groups = layout::make_stand_in_groups(l, layout::rank_of(l, layout::Coord{0, pp_rank, 0, 0}));
  device::CountingDevice dev(DeviceKind::Cpu, 1, groups.rank);
  parallel::EngineConfig ec;
  ec.plan = s.plan;
  ec.zero_stage = s.zero_stage;
  ec.micro_batch = s.micro_batch;
  ec.micro_batches = s.micro_batches;
  parallel::Engine engine(m.build, ec, groups, dev, m.input_shape(s.micro_batch));
  parallel::pipeline::PipelineExecutor& executor = engine.executor();
  executor.observe(std::make_unique<parallel::pipeline::ActionLabels>(dev, executor.virtual_stages()));
  if (replay) executor.set_chunk_calls(std::make_unique<plan::ChunkReplay>(executor.chunk_runner(), dev));
  const device::WorkLog before = dev.work();
  engine.step(
      [&](int64_t, int64_t count) {
        parallel::pipeline::MicroBatch batch;
        batch.inputs = Tensor::empty(m.input_shape(count), m.input_dtype, dev, "batch inputs");
        batch.targets = Tensor::empty({count * m.rows_per_sample}, DType::I32, dev, "batch targets");
        return batch;
      },
      0.0f, 1.0);
  return {dev.peak_bytes(), dev.at_peak(),       dev.peak_live_micro_batches(),
          dev.peak_label(), dev.work() - before, dev.replays()};
}

TEST(ChunkReplay, AccountsWhatRunningEveryCallAccounts) {
  std::vector<MemCase> cases;
  for (MemCase c : {mem_case(1, 1, 1, 0, spec::ScheduleKind::OneFOneB, 1, 1),  // 8 micro-batches of 1
                    mem_case(2, 1, 1, 3),                                      // ZeRO-3's hooks gather and free
                    mem_case(1, 2, 1, 0, spec::ScheduleKind::OneFOneB, 1, 1),
                    mem_case(1, 2, 1, 0, spec::ScheduleKind::Interleaved, 2, 1)})
    for (bool ckpt : {false, true}) {  // checkpointing keeps each chunk's input
      c.model = "gpt";
      c.ckpt = ckpt;
      cases.push_back(c);
    }
  for (const MemCase& c : cases)
    for (int pp_rank = 0; pp_rank < c.pp; ++pp_rank) {
      SCOPED_TRACE(c.name() + " stage " + std::to_string(pp_rank));
      const Account run = step(c, pp_rank, false), replayed = step(c, pp_rank, true);
      EXPECT_EQ(replayed.peak, run.peak);
      EXPECT_EQ(replayed.at_peak, run.at_peak);
      EXPECT_EQ(replayed.live, run.live);
      EXPECT_EQ(replayed.work, run.work);
      // The replay adds the layer its highest point came in: ", at blocks.3 backward".
      EXPECT_EQ(replayed.label.rfind(run.label + ", at ", 0), 0u) << replayed.label << " | " << run.label;
      EXPECT_EQ(run.replays, 0);
      // The probe runs the layers apart from the step; every forward and backward of the step is replayed.
      EXPECT_EQ(replayed.replays, 2 * c.virtual_stages * (c.global / (c.micro * c.dp)));
    }
}

}  // namespace
}  // namespace tandem
