#include "tandem/plan/memory_model.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "tandem/layout/groups.h"
#include "tandem/parallel/engine.h"
#include "tandem/parallel/pipeline/schedule.h"
#include "tandem/plan/chunk_replay.h"
#include "tandem/train/checkpoint.h"

namespace tandem::plan {

namespace pl = parallel::pipeline;

namespace {

parallel::EngineConfig engine_config(const Setup& s) {
  parallel::EngineConfig ec;
  ec.plan = s.plan;
  ec.zero_stage = s.zero_stage;
  ec.micro_batch = s.micro_batch;
  ec.micro_batches = s.micro_batches;
  ec.compute = s.dtype_bytes == 4 ? DType::F32 : DType::BF16;  // fp16 holds the same bytes and runs the same ops
  ec.offload_optimizer = s.offload_optimizer;
  ec.offload_param = s.offload_param;
  ec.tiles = s.tiles;
  // A counting device holds nothing to swap and accounts in order: no swap file (only its size and the buffers' bytes
  // are planned), and each host update run where it is submitted.
  ec.offload_run = {.swap_files = false, .update_thread = false};
  return ec;
}

// "layers 0..7 (wte.weight .. blocks.6); layers 12..15 (...)": the chunks a rank holds.
std::string describe_chunks(parallel::Engine& engine) {
  const auto& layers = engine.model().layers();
  auto label = [&](size_t i) {
    const std::string& n = layers[i]->name();
    if (!n.empty()) return n;
    const auto params = layers[i]->parameters();
    return params.empty() ? "layer " + std::to_string(i) : params.front()->name;
  };
  std::ostringstream os;
  for (size_t c = 0; c < engine.chunks().size(); ++c) {
    const auto [first, last] = engine.chunks()[c];
    os << (c ? "; " : "") << "layers " << first << ".." << last - 1 << " (" << label(first) << " .. " << label(last - 1)
       << ")";
  }
  return os.str();
}

// The work each action of the schedule records, in the order they run.
class ActionWorkLog final : public pl::ActionObserver {
 public:
  explicit ActionWorkLog(device::CountingDevice& device) : device_(device) {}
  void before(const pl::Action&, int) override { start_ = device_.work(); }
  void after(const pl::Action& a) override { actions.push_back({a, device_.work() - start_}); }

  std::vector<ActionWork> actions;

 private:
  device::CountingDevice& device_;
  device::WorkLog start_;
};

struct RankRun {
  RankMemory memory;
  RankWork work;
  bool stepped = false;  // a step was run (not only the engine built)
};

// World rank (replica, pp_rank, tp slot 0) of the setup's layout, the replica being the rank in the ZeRO group
// (dp_rank * cp + context shard): its engine built on a counting device with stand-in groups, and with `step`, one
// training step run on it.
RankRun run_rank(const PlannedModel& m, const Setup& s, int dp_rank, int pp_rank, bool step, uint64_t budget = 0) {
  const layout::Layout& l = s.plan.layout;
  const layout::Coord coord{dp_rank / l.cp, pp_rank, 0, dp_rank % l.cp};
  layout::Groups groups = layout::make_stand_in_groups(l, layout::rank_of(l, coord));
  device::CountingDevice dev(s.backend == Backend::Cuda ? DeviceKind::Cuda : DeviceKind::Cpu, s.cpu_threads,
                             groups.rank);
  dev.set_planned_device(s.device);
  parallel::Engine engine(m.build, engine_config(s), groups, dev, m.input_shape(s.micro_batch));
  pl::PipelineExecutor& executor = engine.executor();
  // The peak's account says in which action and layer it came, and how many micro-batches were held then.
  executor.observe(std::make_unique<pl::ActionLabels>(dev, executor.virtual_stages()));
  ActionWorkLog& work_log = executor.observe(std::make_unique<ActionWorkLog>(dev));
  // Chunks are replayed where their calls are alike from one micro-batch to the next: not with an offloaded store,
  // whose hooks depend on the micro-batch (the first copies, the last reduces) and touch host memory, nor with host
  // checkpoints, whose buffers are reused from one micro-batch to the next (chunk_replay.h).
  if (!engine.store().offloaded() && !executor.host_checkpoints())
    executor.set_chunk_calls(std::make_unique<ChunkReplay>(executor.chunk_runner(), dev));
  RankRun r;
  r.memory.dp_rank = dp_rank;
  r.memory.pp_rank = pp_rank;
  r.memory.resident = dev.live();
  r.memory.layers = describe_chunks(engine);
  r.memory.disk_bytes = static_cast<int64_t>(engine.store().swap_bytes());
  if (s.async_checkpoints)
    r.memory.checkpoint_host = static_cast<int64_t>(train::async_checkpoint_host_bytes(engine, groups.coord));
  r.memory.disk_optimizer = static_cast<int64_t>(engine.store().optimizer_swap_bytes());
  r.memory.disk_parameters = static_cast<int64_t>(engine.store().parameter_swap_bytes());
  device::CountingDevice* host = engine.host_memory() ? device::as_counting(*engine.host_memory()) : nullptr;
  if (host) r.memory.host_resident = host->live();
  if (budget > 0 && dev.live_bytes() > budget) step = false;
  r.stepped = step;
  if (step) {
    const device::WorkLog before = dev.work();
    const device::WorkLog host_before = host ? host->work() : device::WorkLog{};
    engine.step(
        [&](int64_t, int64_t count) {
          return pl::MicroBatch{
              Tensor::empty(m.input_shape(count), m.input_dtype, dev, "batch inputs"),
              Tensor::empty({count * m.rows_per_sample}, DType::I32, dev, "batch targets"),
              s.documents ? Tensor::empty(m.input_shape(count), DType::I32, dev, "batch documents") : Tensor(),
              {},
              nullptr};  // the engine's balance sums
        },
        0.0f, 1.0);
    r.work.actions = std::move(work_log.actions);
    device::WorkLog in_actions;
    for (const auto& a : r.work.actions) in_actions += a.work;
    r.work.end = dev.work() - before - in_actions;
    if (host) r.work.host = host->work() - host_before;
  }
  if (host) {
    r.memory.host_peak = static_cast<int64_t>(host->peak_bytes());
    r.memory.host_at_peak = host->at_peak();
  }
  r.memory.peak = static_cast<int64_t>(dev.peak_bytes());
  r.memory.at_peak = dev.at_peak();
  r.memory.when = dev.peak_label();
  r.memory.live_micro_batches = dev.peak_live_micro_batches();
  const int live = std::max(1, r.memory.live_micro_batches);
  r.memory.activations_per_micro_batch = r.memory.at_peak[MemoryPurpose::Activations] / live;
  return r;
}

}  // namespace

const RankMemory& MemoryPrediction::of_rank(int world_rank) const {
  const layout::Coord c = layout::coord_of(layout, world_rank);
  return ranks.at(static_cast<size_t>(layout::replica_of(layout, c) * layout.pp + c.pp));
}

int64_t MemoryPrediction::host_peak() const {
  int64_t most = 0;
  for (const RankMemory& r : ranks) most = std::max(most, r.host_peak + r.checkpoint_host);
  return most;
}

namespace {

// The most of `bytes` of the world ranks that any run of `ranks_per_node` consecutive ranks (a node) holds together.
int64_t per_node(const MemoryPrediction& p, int ranks_per_node,
                 const std::function<int64_t(const RankMemory&)>& bytes) {
  const int n = std::max(ranks_per_node, 1);
  int64_t most = 0;
  for (int first = 0; first < p.layout.world(); first += n) {
    int64_t node = 0;
    for (int r = first; r < std::min(first + n, p.layout.world()); ++r) node += bytes(p.of_rank(r));
    most = std::max(most, node);
  }
  return most;
}

}  // namespace

int64_t MemoryPrediction::host_per_node(int ranks_per_node) const {
  return per_node(*this, ranks_per_node, [](const RankMemory& r) { return r.host_peak + r.checkpoint_host; });
}

int64_t MemoryPrediction::disk_per_node(int ranks_per_node, bool parameters) const {
  return per_node(*this, ranks_per_node,
                  [&](const RankMemory& r) { return parameters ? r.disk_parameters : r.disk_optimizer; });
}

const RankMemory& MemoryPrediction::worst() const {
  TANDEM_CHECK(!ranks.empty(), "empty memory prediction");
  return *std::max_element(ranks.begin(), ranks.end(),
                           [](const RankMemory& a, const RankMemory& b) { return a.peak < b.peak; });
}

MemoryModel::MemoryModel(PlannedModel model) : model_(std::move(model)) {}

int64_t MemoryModel::logical_parameters() {
  if (logical_parameters_ < 0) {
    logical_parameters_ = 0;
    const nn::Model whole = model_.build(nn::TpSlot{});  // unmaterialised: it holds no memory
    for (const nn::Parameter* p : whole.parameters()) logical_parameters_ += shape_numel(p->global_shape);
  }
  return logical_parameters_;
}

MemoryPrediction MemoryModel::predict(const Setup& setup, bool every_replica, uint64_t budget) {
  Setup s = setup;
  const layout::Layout& l = s.plan.layout;
  if (l.replicas() == 1) s.zero_stage = 0;
  const int v = s.plan.virtual_stages;
  const auto kind = v > 1 ? pl::ScheduleKind::Interleaved : s.plan.schedule;
  const pl::ScheduleSpec spec{l.pp, static_cast<int>(s.micro_batches), v};

  MemoryPrediction out;
  out.layout = l;
  out.ranks.resize(static_cast<size_t>(l.replicas() * l.pp));
  for (int r = 0; r < l.pp; ++r) {
    const RankRun base = run_rank(model_, s, 0, r, !out.resident_only, budget);
    out.resident_only = out.resident_only || !base.stepped;
    out.work.push_back(base.work);
    for (int d = 0; d < l.replicas(); ++d) {
      RankMemory rm = base.memory;
      if (d > 0 && every_replica) {
        // Replicas differ only in what the engine holds once built (the optimizer state of the shard each
        // owns), and hold it all step: the same step on top of a smaller base.
        const RankMemory other = run_rank(model_, s, d, r, false).memory;
        const device::Breakdown less = base.memory.resident - other.resident;
        rm.resident = other.resident;
        rm.at_peak = base.memory.at_peak - less;
        rm.peak = rm.at_peak.total();
        const device::Breakdown host_less = base.memory.host_resident - other.host_resident;
        rm.host_resident = other.host_resident;
        rm.host_at_peak = base.memory.host_at_peak - host_less;
        rm.host_peak = rm.host_at_peak.total();
        rm.disk_bytes = other.disk_bytes;
        rm.checkpoint_host = other.checkpoint_host;
        rm.disk_optimizer = other.disk_optimizer;
        rm.disk_parameters = other.disk_parameters;
      }
      rm.dp_rank = d;
      rm.activation_bound = pl::activation_bound(kind, spec, r);
      out.ranks[static_cast<size_t>(d * l.pp + r)] = rm;
    }
  }
  return out;
}

}  // namespace tandem::plan
