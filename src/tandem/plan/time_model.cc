#include "tandem/plan/time_model.h"

#include <algorithm>

#include "tandem/parallel/zero/parameter_store.h"

namespace tandem::plan {

namespace pl = parallel::pipeline;
using device::CommAxis;

namespace {

// Whether any group of one axis has members on two hosts. Rank map: rank = tp + tp * (pp + pp * dp).
bool axis_spans_nodes(const layout::Layout& l, int per_node, char axis) {
  for (int r = 0; r < l.world(); ++r) {
    const layout::Coord c = layout::coord_of(l, r);
    layout::Coord o = c;
    const int n = axis == 't' ? l.tp : axis == 'p' ? l.pp : axis == 'c' ? l.cp : l.dp;
    for (int i = 0; i < n; ++i) {
      (axis == 't' ? o.tp : axis == 'p' ? o.pp : axis == 'c' ? o.cp : o.dp) = i;
      if (layout::rank_of(l, o) / per_node != r / per_node) return true;
    }
  }
  return false;
}

// Seconds of recorded work, split the way TimePrediction reports it.
struct Seconds {
  double compute = 0, tp = 0, pp = 0, dp = 0, offload = 0;
  double total() const { return compute + tp + pp + dp + offload; }
  Seconds& operator+=(const Seconds& o) {
    compute += o.compute;
    tp += o.tp;
    pp += o.pp;
    dp += o.dp;
    offload += o.offload;
    return *this;
  }
};

class Pricing {
 public:
  Pricing(const Rates& r, const layout::Layout& l, int nodes, bool fp32) : r_(r), fp32_(fp32) {
    const int per_node = l.world() / nodes;
    bw_[static_cast<size_t>(CommAxis::Tp)] = axis_spans_nodes(l, per_node, 't') ? r.inter_node_bus_bw : r.tp_bus_bw;
    bw_[static_cast<size_t>(CommAxis::Dp)] = axis_spans_nodes(l, per_node, 'd') ? r.inter_node_bus_bw : r.dp_bus_bw;
    bw_[static_cast<size_t>(CommAxis::Pp)] = axis_spans_nodes(l, per_node, 'p') ? r.inter_node_p2p_bw : r.pp_p2p_bw;
    bw_[static_cast<size_t>(CommAxis::World)] = nodes > 1 ? r.inter_node_bus_bw : r.dp_bus_bw;
    // Context parallelism's all-to-all runs between neighbours of one virtual GPU, as tensor parallelism's reductions.
    bw_[static_cast<size_t>(CommAxis::Cp)] = axis_spans_nodes(l, per_node, 'c') ? r.inter_node_bus_bw : r.tp_bus_bw;
  }

  Seconds price(const device::WorkLog& w) const {
    Seconds s;
    s.compute = w.gemm_flops / r_.gemm_flops + w.gemm_flops_fp32 / r_.gemm_flops_fp32 +
                w.gemm_flops_fp8 / r_.gemm_flops_fp8 + w.grouped_flops / r_.grouped_flops + attention(w) +
                w.bytes / r_.memory_bw + w.ops * r_.op_overhead_s;
    auto comm = [&](CommAxis a) {
      const auto i = static_cast<size_t>(a);
      return w.comm_calls[i] * r_.latency_s + w.comm_bus_bytes[i] / bw_[i];
    };
    s.tp = comm(CommAxis::Tp) + comm(CommAxis::Cp);  // both wait inside a layer
    s.pp = comm(CommAxis::Pp);
    s.dp = comm(CommAxis::Dp) + comm(CommAxis::World);
    s.offload = w.to_host_bytes / r_.to_host_bw + w.from_host_bytes / r_.from_host_bw;
    return s;
  }

  // Attention's seconds: forward and backward at their rates, in fp32 no faster than an fp32 product; on a GPU each
  // head's FLOPs weighted by its width (ops::attention_head_weight).
  double attention(const device::WorkLog& w) const {
    const bool gpu = r_.device == "cuda";
    const double all = gpu ? w.attention_weighted_flops : w.attention_flops;
    const double backward = gpu ? w.attention_weighted_backward_flops : w.attention_backward_flops;
    const auto rate = [&](double r) { return fp32_ ? std::min(r, r_.gemm_flops_fp32) : r; };
    return (all - backward) / rate(r_.attention_forward_flops) + backward / rate(r_.attention_backward_flops);
  }

  // The host's own work (offload): its memory traffic, the only term host ops have that matters.
  double price_host(const device::WorkLog& w) const { return w.bytes / r_.host_memory_bw + w.ops * 1e-6; }

 private:
  const Rates& r_;
  bool fp32_;
  std::array<double, device::kCommAxes> bw_{};
};

// Of the parameters offload_optimizer.ratio sends to the host, the share of the unit whose update nothing hides: the
// first layer the ratio's rule offloads (parallel::ratio_offloads), whose gradient comes last in the backward and
// which the next step's forward needs first. Over the whole model's layers (a pipeline rank's are a part of them).
double last_unit_share(const MemoryModel& memory, double ratio) {
  const nn::Model model = memory.model().build(nn::TpSlot{});
  std::vector<int64_t> params;  // by layer
  int64_t held = 0;
  for (const auto& layer : model.layers()) {
    int64_t n = 0;
    for (const nn::Parameter* p : layer->parameters()) n += shape_numel(p->shape);
    params.push_back(n);
    held += n;
  }
  int64_t seen = 0, first = -1, offloaded = 0;
  for (const int64_t n : params) {
    seen += n;
    if (!parallel::ratio_offloads(seen, held, ratio)) continue;
    if (first < 0) first = n;
    offloaded += n;
  }
  return offloaded > 0 ? static_cast<double>(first) / static_cast<double>(offloaded) : 0.0;
}

}  // namespace

TimePrediction predict_time(MemoryModel& memory, const MemoryPrediction& prediction, const Setup& s, const Rates& r,
                            int nodes) {
  const layout::Layout& l = s.plan.layout;
  TANDEM_CHECK(nodes >= 1 && l.world() % nodes == 0, "planner: ", l.world(), " devices do not split over ", nodes,
               " nodes");
  TANDEM_CHECK(static_cast<int>(prediction.work.size()) == l.pp, "planner: work of ", prediction.work.size(),
               " pipeline ranks for pp ", l.pp);
  const Pricing pricing(r, l, nodes, s.dtype_bytes == 4);
  const double m = static_cast<double>(s.micro_batches);

  // Per pipeline rank: its actions (one step's micro-batches through its chunks) and its end of the step.
  Seconds slow, slowest_end;
  double slow_per_mb = -1, end_s = 0, host_s = 0;
  for (const RankWork& w : prediction.work) {
    Seconds actions;
    for (const auto& a : w.actions) actions += pricing.price(a.work);
    Seconds end = pricing.price(w.end);
    const double host = pricing.price_host(w.host);
    if (actions.total() / m > slow_per_mb) {
      slow_per_mb = actions.total() / m;
      slow = actions;
    }
    if (end.total() + host > end_s + host_s) {
      end_s = end.total();
      host_s = host;
      slowest_end = end;
    }
  }

  TimePrediction t;
  const double fill = static_cast<double>(l.pp - 1) / s.plan.virtual_stages;  // micro-batch times of fill and drain
  t.compute_s = slow.compute;
  t.tp_s = slow.tp;
  t.pp_s = slow.pp;
  t.dp_s = slow.dp + slowest_end.dp + slowest_end.tp + slowest_end.pp;
  t.optimizer_s = slowest_end.compute;
  t.offload_s = slow.offload + slowest_end.offload;
  t.host_s = host_s;
  t.bubble_s = fill * slow_per_mb;
  t.bubble_fraction = fill / (m + fill);
  // The copies as the actions and the end of the step hold them, and the device's own work besides.
  const double copies_s = (m + fill) / m * slow.offload + slowest_end.offload;
  const double device_s = (m + fill) * slow_per_mb + end_s - copies_s;
  const double chain_s = copies_s + host_s;  // the host's chain: the copies down and up, and its AdamW
  const spec::OffloadConfig& o = s.offload_optimizer;
  if (o.enabled() && o.update == spec::OffloadUpdate::InBackward) {
    // Beside the device, but for the unit whose gradient comes last: its update and upload, before its next use.
    const double tail_s = last_unit_share(memory, o.ratio) * chain_s;
    t.step_s = std::max(device_s, chain_s) + tail_s;
  } else {
    t.step_s = device_s + chain_s;
  }
  t.offload_hidden_s = std::max(0.0, device_s + chain_s - t.step_s);

  const PlannedModel& pm = memory.model();
  const double global = static_cast<double>(s.micro_batch) * m * l.dp;
  const double rows = global * static_cast<double>(pm.rows_per_sample);
  t.samples_per_s = global / t.step_s;
  t.tokens_per_s = rows / t.step_s;
  t.unit = pm.unit;
  t.model_flops_per_step = rows * (6.0 * static_cast<double>(memory.logical_parameters()) + pm.extra_flops_per_row);
  t.model_flops_per_device_s = t.model_flops_per_step / t.step_s / l.world();
  return t;
}

}  // namespace tandem::plan
