#include "tandem/plan/memory_model.h"

#include <algorithm>
#include <sstream>

#include "tandem/parallel/pipeline/schedule.h"

namespace tandem::plan {

namespace pl = parallel::pipeline;
using shadow::Sym;

namespace {

// The cuBLASLt workspace every CUDA device keeps (ops/cuda/gemm.cc, kWorkspaceBytes).
constexpr int64_t kCudaGemmWorkspace = int64_t{32} << 20;

// One Forward or Backward action's cost relative to what was live when it started.
struct PhaseCost {
  Breakdown peak;  // live - start at the action's highest point
  Breakdown end;   // live - start when it is done
  std::string where;
};

// One micro-batch through one chunk, replayed once; every micro-batch of the step costs the same.
struct ChunkProfile {
  PhaseCost fwd, bwd;
  int64_t in_bytes = 0;   // the chunk's input activation (= its input gradient)
  int64_t out_bytes = 0;  // its output (the logits on the last stage)
  Term out_term = Term::Activations;
  int64_t held = 0;               // what one micro-batch leaves held between forward and backward, output aside
  int64_t largest_transient = 0;  // the most held as Transient during either action
};

struct ProfileArgs {
  const ModelInfo* model;
  pl::LayerRange range;
  int stage = 0, stages = 1, pp = 1;
  Shape in_shape, out_shape;
  const Setup* setup;
  int dp = 1, zero = 0;
  const std::vector<int64_t>* shard;
};

// PipelineExecutor::run's Forward and Backward cases for one micro-batch through one chunk.
ChunkProfile profile_chunk(const ProfileArgs& a) {
  const Setup& s = *a.setup;
  shadow::Tracker t;
  shadow::Context c{&t, s.dtype_bytes, s.backend, s.cpu_threads};
  shadow::ZeroShadow hooks(c, a.zero, a.dp, *a.shard, s.dtype_bytes);
  const bool first = a.stage == 0, last = a.stage == a.stages - 1;
  // With one pipeline rank, neighbouring chunks hand tensors over directly; otherwise they arrive by recv.
  const bool handoff = a.pp == 1;
  const bool recompute = s.plan.activation_checkpointing;
  const int64_t micro = s.micro_batch;

  Sym input;
  if (!first) input = c.act(a.in_shape, handoff ? Term::Activations : Term::Communication);
  ChunkProfile p;
  p.in_bytes = shape_numel(a.in_shape) * s.dtype_bytes;
  p.out_bytes = shape_numel(a.out_shape) * s.dtype_bytes;
  p.out_term = last ? Term::Transient : Term::Activations;

  // Forward: the batch (first and last stage), the chunk's layers, the loss on the last stage.
  t.reset_peak();
  Breakdown start = t.live();
  std::vector<shadow::SymSaved> saved;
  Sym output, grad;
  {
    Sym mb_inputs, mb_targets;
    if (first || last) {
      t.set_where("batch");
      mb_inputs = Sym(t, a.model->input_shape(micro), 4, Term::Other);
      mb_targets = Sym(t, {micro * a.model->rows_per_sample()}, 4, Term::Other);
      // Engine::step: float features enter in the compute dtype (the fp32 batch goes once cast).
      if (a.model->type != "gpt" && s.dtype_bytes != 4) mb_inputs = c.act(a.model->input_shape(micro), Term::Other);
    }
    Sym x = first ? mb_inputs : std::move(input);
    Sym y = shadow::forward_range(c, *a.model, a.range.first, a.range.second, x, saved, recompute, hooks);
    if (last) {
      shadow::loss(c, y);
      grad = y;
    } else {
      output = y;  // sent and held until the step ends, or handed to the next chunk
    }
  }
  p.fwd = {t.at_peak() - start, t.live() - start, t.peak_where()};
  p.held = p.fwd.end.total() - p.out_bytes;
  p.largest_transient = t.max_live(Term::Transient);

  // Backward: from the gradient of the output (received, handed over, or the logits' own on the last stage).
  Sym dy = last ? std::move(grad) : c.act(a.out_shape, handoff ? Term::Transient : Term::Communication);
  t.reset_peak();
  start = t.live();
  Sym input_grad;
  {
    const Sym d = std::move(dy);
    Sym dx = shadow::backward_range(c, *a.model, a.range.first, a.range.second, d, saved, recompute, hooks);
    saved.clear();
    if (!first) input_grad = dx;  // sent and held until the step ends, or handed to the previous chunk
  }
  p.bwd = {t.at_peak() - start, t.live() - start, t.peak_where()};
  p.largest_transient = std::max(p.largest_transient, t.max_live(Term::Transient));
  return p;
}

// The engine's resident state for the layers of one rank on dp rank `d` (ParameterStore's constructor and
// AdamW's), and the fixed workspaces of the device's ops.
Breakdown resident_bytes(const ModelInfo& m, const std::vector<size_t>& held, const Setup& s, int dp, int zero, int d) {
  Breakdown r;
  const int64_t x = s.dtype_bytes;
  for (size_t layer : held) {
    const int64_t n = m.layers[layer].params, shard = (n + dp - 1) / dp, padded = shard * dp;
    const int64_t own = std::clamp<int64_t>(std::min(n, (d + 1) * shard) - d * shard, 0, shard);
    // The values layers read, in the compute dtype (gathered per layer instead at stage 3), and the fp32 master
    // the optimizer updates: the same memory as the values when computing in fp32 at stages 0-2.
    if (zero < 3) r[Term::Parameters] += padded * x;
    if (x != 4 || zero == 3) r[Term::Parameters] += (zero == 0 ? padded : shard) * 4;
    if (zero <= 1) r[Term::Gradients] += padded * 4;
    if (zero >= 1) r[Term::Gradients] += shard * 4;
    r[Term::Optimizer] += 2 * 4 * (zero == 0 ? n : own);
  }
  if (s.backend == Backend::Cuda) r[Term::Other] += kCudaGemmWorkspace;
  return r;
}

struct ScheduleRun {
  Breakdown at_peak;
  int64_t peak = 0;
  std::string when;
  int live = 0;
};

// PipelineExecutor::run at the level of actions: receive buffers, each action's replayed cost, sends held
// until the step ends.
ScheduleRun run_schedule(const std::vector<pl::Action>& actions, const std::vector<ChunkProfile>& prof) {
  ScheduleRun r;
  Breakdown live;
  live[Term::Other] += 4;  // Engine::step's loss sum (1) f32, on every rank for the whole step
  int held = 0;
  auto consider = [&](const Breakdown& b, const pl::Action& a, const PhaseCost& ph, int live_mbs) {
    if (b.total() <= r.peak) return;
    r.peak = b.total();
    r.at_peak = b;
    r.live = live_mbs;
    std::ostringstream os;
    os << (a.kind == pl::ActionKind::Forward ? "forward" : "backward") << " of micro-batch " << a.micro_batch;
    if (prof.size() > 1) os << " (chunk " << a.chunk << ")";
    if (!ph.where.empty()) os << ", at " << ph.where;
    r.when = os.str();
  };
  for (const pl::Action& a : actions) {
    const ChunkProfile& p = prof[static_cast<size_t>(a.chunk)];
    switch (a.kind) {
      case pl::ActionKind::RecvActivation:
        live[Term::Communication] += p.in_bytes;
        break;
      case pl::ActionKind::Forward:
        consider(live + p.fwd.peak, a, p.fwd, held + 1);
        live += p.fwd.end;
        ++held;
        break;
      case pl::ActionKind::SendActivation:
        live[p.out_term] -= p.out_bytes;
        live[Term::Communication] += p.out_bytes;
        break;
      case pl::ActionKind::RecvGradient:
        live[Term::Communication] += p.out_bytes;
        break;
      case pl::ActionKind::Backward:
        consider(live + p.bwd.peak, a, p.bwd, held);
        live += p.bwd.end;
        --held;
        break;
      case pl::ActionKind::SendGradient:
        live[Term::Transient] -= p.in_bytes;
        live[Term::Communication] += p.in_bytes;
        break;
    }
  }
  return r;
}

}  // namespace

const RankMemory& MemoryPrediction::of_rank(int world_rank) const {
  const layout::Coord c = layout::coord_of(layout, world_rank);
  return ranks.at(static_cast<size_t>(c.dp * layout.pp + c.pp));
}

const RankMemory& MemoryPrediction::worst() const {
  TANDEM_CHECK(!ranks.empty(), "empty memory prediction");
  return *std::max_element(ranks.begin(), ranks.end(),
                           [](const RankMemory& a, const RankMemory& b) { return a.peak < b.peak; });
}

MemoryModel::MemoryModel(config::Json model_cfg) : cfg_(std::move(model_cfg)) {}

const ModelInfo& MemoryModel::model(int tp) {
  auto it = models_.find(tp);
  if (it == models_.end()) it = models_.emplace(tp, std::make_unique<ModelInfo>(describe_model(cfg_, tp))).first;
  return *it->second;
}

const std::vector<pl::LayerRange>& MemoryModel::chunks(const layout::ParallelPlan& plan) {
  const ModelInfo& m = model(plan.layout.tp);
  if (!plan.stages.empty()) {
    mapped_ = pl::gpt_stage_map(m.model, plan.stages);
    return mapped_;
  }
  const auto key = std::make_pair(plan.layout.tp, plan.layout.pp * plan.virtual_stages);
  auto it = balanced_.find(key);
  if (it == balanced_.end()) it = balanced_.emplace(key, pl::balance_by_parameters(m.model, key.second)).first;
  return it->second;
}

MemoryPrediction MemoryModel::predict(const Setup& s) {
  const layout::Layout& l = s.plan.layout;
  const int v = s.plan.virtual_stages, stages = l.pp * v;
  const ModelInfo& m = model(l.tp);
  const std::vector<pl::LayerRange> all = chunks(s.plan);
  TANDEM_CHECK(static_cast<int>(all.size()) == stages, "planner: ", all.size(), " chunks for ", stages, " stages");
  const int zero = l.dp > 1 ? s.zero_stage : 0;
  const auto kind = v > 1 ? pl::ScheduleKind::Interleaved : pl::schedule_from_name(s.plan.schedule);
  const pl::ScheduleSpec spec{l.pp, static_cast<int>(s.micro_batches), v};
  const auto schedule = pl::build_schedule(kind, spec);

  std::vector<int64_t> shard(m.layers.size());
  for (size_t i = 0; i < m.layers.size(); ++i) shard[i] = (m.layers[i].params + l.dp - 1) / l.dp;

  // The shapes the executor sizes its buffers with: each chunk's input and output for one micro-batch.
  std::vector<Shape> boundary{m.input_shape(s.micro_batch)};
  for (const auto& layer : m.model.layers()) boundary.push_back(layer->output_shape(boundary.back()));

  MemoryPrediction out;
  out.layout = l;
  out.ranks.resize(static_cast<size_t>(l.dp * l.pp));
  for (int r = 0; r < l.pp; ++r) {
    std::vector<ChunkProfile> prof;
    std::vector<size_t> held;
    std::ostringstream layers;
    int64_t per_mb = 0, transient = 0;
    for (int c = 0; c < v; ++c) {
      const int stage = pl::global_stage(r, c, l.pp);
      const pl::LayerRange range = all[static_cast<size_t>(stage)];
      for (size_t i = range.first; i < range.second; ++i) held.push_back(i);
      ProfileArgs a{&m, range, stage, stages, l.pp, boundary[range.first], boundary[range.second],
                    &s, l.dp,  zero,  &shard};
      prof.push_back(profile_chunk(a));
      per_mb += prof.back().held;
      transient = std::max(transient, prof.back().largest_transient);
      layers << (c ? "; " : "") << "layers " << range.first << ".." << range.second - 1 << " ("
             << m.layers[range.first].name << " .. " << m.layers[range.second - 1].name << ")";
    }
    const ScheduleRun run = run_schedule(schedule[static_cast<size_t>(r)], prof);
    for (int d = 0; d < l.dp; ++d) {
      RankMemory& rm = out.ranks[static_cast<size_t>(d * l.pp + r)];
      rm.dp_rank = d;
      rm.pp_rank = r;
      rm.resident = resident_bytes(m, held, s, l.dp, zero, d);
      rm.at_peak = rm.resident + run.at_peak;
      rm.peak = rm.at_peak.total();
      rm.when = run.when;
      rm.live_micro_batches = run.live;
      rm.activation_bound = pl::activation_bound(kind, spec, r);
      rm.activations_per_micro_batch = per_mb;
      rm.largest_transient = transient;
      rm.layers = layers.str();
    }
  }
  return out;
}

}  // namespace tandem::plan
