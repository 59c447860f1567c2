#include "tandem/layout/layout.h"

#include <algorithm>
#include <sstream>

#include "tandem/core/error.h"

namespace tandem::layout {

std::string Layout::str() const {
  std::ostringstream os;
  os << "dp " << dp << " x pp " << pp << " x tp " << tp;
  if (cp > 1) os << " x cp " << cp;
  if (ep > 1) os << " (ep " << ep << ")";
  return os.str();
}

Coord coord_of(const Layout& l, int rank) {
  TANDEM_CHECK(rank >= 0 && rank < l.world(), "rank ", rank, " outside ", l.str());
  return Coord{rank / (l.tp * l.cp * l.pp), (rank / (l.tp * l.cp)) % l.pp, rank % l.tp, (rank / l.tp) % l.cp};
}

int rank_of(const Layout& l, const Coord& c) { return c.tp + l.tp * (c.cp + l.cp * (c.pp + l.pp * c.dp)); }

ParallelPlan resolve_parallel(const spec::ParallelConfig& p, int world) {
  ParallelPlan plan;
  if (p.planned)
    TANDEM_FAIL("\"parallel\": \"auto\" needs the planner; give the layout explicitly, e.g. {\"virtual_gpus\": 2, ",
                "\"pipeline\": 2}");
  const bool has_dp = p.virtual_gpus.has_value(), has_pp = p.pipeline.has_value(), has_tp = p.tensor.has_value();
  int dp = p.virtual_gpus.value_or(0), pp = p.pipeline.value_or(1), tp = p.tensor.value_or(1);
  // Context parallelism is never derived: the other axes share out the devices its shards leave.
  const int cp = p.context.value_or(1);
  if (cp < 1 || world % cp != 0)
    TANDEM_FAIL("parallel.context ", cp, " does not divide the ", world, " process", world == 1 ? "" : "es",
                " of this job: run with -n ", std::max(cp, 1), " (or a multiple of it) or change parallel.context");
  const int full_world = world;
  world /= cp;
  if (!has_dp) {
    if (world % (pp * tp) != 0)
      TANDEM_FAIL("a virtual GPU of pipeline ", pp, " x tensor ", tp, " = ", pp * tp, " devices does not divide the ",
                  world, " process", world == 1 ? "" : "es", " of this job: run with -n ", pp * tp,
                  " (or a multiple of it) or change parallel.pipeline / parallel.tensor");
    dp = world / (pp * tp);
  } else if (!has_pp && !has_tp && world % dp == 0) {
    pp = world / dp;  // the virtual GPU is a pipeline unless told otherwise
  } else if (has_pp && !has_tp && world % (dp * pp) == 0) {
    tp = world / (dp * pp);
  } else if (has_tp && !has_pp && world % (dp * tp) == 0) {
    pp = world / (dp * tp);
  }
  plan.layout = Layout{dp, pp, tp, cp};
  if (plan.layout.world() != full_world)
    TANDEM_FAIL("the layout ", plan.layout.str(), " needs ", plan.layout.world(), " devices but the job has ",
                full_world, " processes: run with -n ", plan.layout.world(),
                cp > 1 ? " or change parallel.virtual_gpus, parallel.pipeline, parallel.tensor or parallel.context"
                       : " or change parallel.virtual_gpus, parallel.pipeline or parallel.tensor");

  plan.layout.ep = p.expert.value_or(1);
  if (plan.layout.replicas() % plan.layout.ep != 0)
    TANDEM_FAIL("parallel.expert ", plan.layout.ep, " does not divide the ", plan.layout.replicas(),
                " ranks that hold the same layers (virtual_gpus ", dp, cp > 1 ? " x context " + std::to_string(cp) : "",
                "): experts are spread over ranks of one ZeRO group; make virtual_gpus a multiple of ", plan.layout.ep,
                " or change parallel.expert");
  plan.schedule = p.schedule;
  const bool interleaved = plan.schedule == spec::ScheduleKind::Interleaved;
  plan.virtual_stages = p.virtual_stages.value_or(interleaved ? 2 : 1);
  if (plan.virtual_stages > 1 && !interleaved)
    TANDEM_FAIL("parallel.virtual_stages ", plan.virtual_stages, " needs \"schedule\": \"interleaved\"");
  plan.activation_checkpointing = p.activation_checkpointing;
  plan.cpu_checkpointing = p.cpu_checkpointing;
  // Host memory holds what checkpointing keeps: without checkpointing every activation stays on the device.
  if (plan.cpu_checkpointing && !plan.activation_checkpointing)
    TANDEM_FAIL(
        "parallel.cpu_checkpointing keeps the checkpointed layer inputs in host memory, so it needs "
        "activation checkpointing: set \"parallel\": {\"activation_checkpointing\": true}, or remove "
        "cpu_checkpointing");
  if (p.cpu_checkpointing_layers && !plan.cpu_checkpointing)
    TANDEM_FAIL(
        "parallel.cpu_checkpointing_layers says how many layers' inputs go to host memory, so it needs "
        "\"cpu_checkpointing\": true");
  plan.cpu_checkpointing_layers = p.cpu_checkpointing_layers.value_or(-1);
  plan.keep_attention = p.keep_attention;
  plan.context_attention = p.context_attention;
  if (plan.keep_attention && !plan.activation_checkpointing)
    TANDEM_FAIL(
        "parallel.keep_attention keeps attention's output for activation checkpointing's recomputation, so it needs "
        "activation checkpointing: set \"parallel\": {\"activation_checkpointing\": true}, or remove keep_attention");
  if (p.timeout_s) plan.timeout_s = *p.timeout_s;
  plan.stages = p.stages;
  return plan;
}

void validate_for_model(const ParallelPlan& plan, const spec::ModelConfig& model, int64_t micro_batches) {
  const Layout& l = plan.layout;
  spec::check_layout(model, l.pp, l.tp, plan.virtual_stages, plan.stages);
  spec::check_context(model, l.cp, l.tp, plan.context_attention);
  spec::check_experts(model, l.ep);
  if (plan.schedule == spec::ScheduleKind::Interleaved && l.pp > 1 && micro_batches % l.pp != 0)
    TANDEM_FAIL("the interleaved schedule needs gradient_accumulation_steps (micro-batches per step, here ",
                micro_batches, ") to be a multiple of parallel.pipeline ", l.pp);
}

std::string describe_rank_map(const Layout& l, const std::string& device_prefix) {
  std::ostringstream os;
  for (int r = 0; r < l.world(); ++r) {
    const Coord c = coord_of(l, r);
    os << "  rank " << r << " -> vgpu " << c.dp << ", stage " << c.pp << ", tp slot " << c.tp;
    if (l.cp > 1) os << ", context shard " << c.cp;
    os << ", device " << device_prefix << r << "\n";
  }
  return os.str();
}

}  // namespace tandem::layout
