#include "tandem/plan/time_model.h"

#include <algorithm>

#include "tandem/parallel/pipeline/schedule.h"

namespace tandem::plan {

namespace pl = parallel::pipeline;

namespace {

// Seconds of the collectives Tandem issues, as NCCL's bus-bandwidth convention prices them.
double all_reduce_s(double bytes, int n, double bus_bw, double latency) {
  return n <= 1 ? 0.0 : latency + 2.0 * (n - 1) / n * bytes / bus_bw;
}
double scatter_or_gather_s(double full_bytes, int n, double bus_bw, double latency) {
  return n <= 1 ? 0.0 : latency + static_cast<double>(n - 1) / n * full_bytes / bus_bw;
}

// Whether any group of one axis has members on two hosts. Rank map: rank = tp + tp * (pp + pp * dp).
bool axis_spans_nodes(const layout::Layout& l, int per_node, char axis) {
  for (int r = 0; r < l.world(); ++r) {
    const layout::Coord c = layout::coord_of(l, r);
    layout::Coord o = c;
    const int n = axis == 't' ? l.tp : axis == 'p' ? l.pp : l.dp;
    for (int i = 0; i < n; ++i) {
      (axis == 't' ? o.tp : axis == 'p' ? o.pp : o.dp) = i;
      if (layout::rank_of(l, o) / per_node != r / per_node) return true;
    }
  }
  return false;
}

struct Bandwidths {
  double tp, dp, p2p;
};

// The work of one layer for one micro-batch, split the way TimePrediction reports it.
struct LayerCost {
  double compute_f = 0, compute_b = 0, tp_f = 0, tp_b = 0, dp_f = 0, dp_b = 0;
};

LayerCost layer_cost(const ModelInfo& m, size_t i, const Shape& in_shape, const Setup& s, const Rates& r,
                     const Bandwidths& bw, int zero, int dp) {
  const LayerInfo& l = m.layers[i];
  const double gemm = s.dtype_bytes < 4 ? r.gemm_flops : r.gemm_flops_fp32;
  const double attn = s.dtype_bytes < 4 ? r.attention_flops : std::min(r.attention_flops, r.gemm_flops_fp32);
  const double e = s.dtype_bytes, lat = r.latency_s;
  const int tp = m.tp;
  LayerCost c;
  // Elementwise traffic: every byte the forward allocates is written once and read once later; backward
  // moves about twice that. The replay counts the bytes (shadow.h).
  shadow::Tracker t;
  const shadow::Context ctx{&t, s.dtype_bytes, s.backend, s.cpu_threads};
  {
    shadow::SymSaved saved;
    const shadow::Sym x(t, in_shape, l.kind == LayerKind::Embedding ? 4 : s.dtype_bytes, Term::Activations);
    shadow::layer_forward(ctx, l, x, saved, Term::Activations);
  }
  // Plus a fixed cost per op (about one allocation each), which dominates small micro-batches on a GPU.
  const double traffic_f = 2.0 * static_cast<double>(t.allocated_total()) / r.memory_bw +
                           static_cast<double>(t.allocations()) * r.op_overhead_s;
  double matmul = 0, attention = 0;
  const double rows = static_cast<double>(shape_numel(in_shape)) / static_cast<double>(in_shape.back());
  switch (l.kind) {
    case LayerKind::Block: {
      const double B = static_cast<double>(in_shape[0]), T = static_cast<double>(in_shape[1]);
      matmul = 24.0 * B * T * l.dim * l.dim_local;  // qkv 3, proj 1, fc 4, out 4: 12 C C_local multiply-adds
      attention = 2.0 * B * T * T * l.dim_local;    // q k^T and p v, causal half
      const double act = B * T * l.dim * e;
      c.tp_f = 2 * all_reduce_s(act, tp, bw.tp, lat);  // proj and out outputs
      c.tp_b = 2 * all_reduce_s(act, tp, bw.tp, lat);  // qkv and fc input gradients
      break;
    }
    case LayerKind::Embedding:
      c.tp_f = all_reduce_s(static_cast<double>(shape_numel(in_shape)) * l.dim * e, tp, bw.tp, lat);
      break;
    case LayerKind::Head:
      matmul = 2.0 * rows * l.dim * l.vocab_local;
      c.tp_b = all_reduce_s(rows * l.dim * e, tp, bw.tp, lat);  // column-parallel input gradient
      c.tp_f = 3 * all_reduce_s(rows * 4, tp, bw.tp, lat);      // the loss's max, sum-exp and target
      break;
    case LayerKind::Linear:
      matmul = 2.0 * rows * l.in * l.out;
      if (l.sum_forward) c.tp_f = all_reduce_s(rows * l.out * e, tp, bw.tp, lat);
      if (l.sum_backward) c.tp_b = all_reduce_s(rows * l.in * e, tp, bw.tp, lat);
      break;
    case LayerKind::Activation:
      break;
  }
  c.compute_f = matmul / gemm + attention / attn + traffic_f;
  c.compute_b = 2 * matmul / gemm + 2.5 * attention / attn + 2 * traffic_f;
  if (s.plan.activation_checkpointing) {  // the forward runs again, tp sums included
    c.compute_b += c.compute_f;
    c.tp_b += c.tp_f;
  }
  // ZeRO's per-layer collectives block in the hooks (ParameterStore::before_forward / after_backward).
  const double padded = static_cast<double>((l.params + dp - 1) / dp * dp);
  if (zero == 3) {
    c.dp_f += scatter_or_gather_s(padded * s.dtype_bytes, dp, bw.dp, lat);
    c.dp_b += scatter_or_gather_s(padded * s.dtype_bytes, dp, bw.dp, lat);
  }
  if (zero >= 2) c.dp_b += scatter_or_gather_s(padded * 4, dp, bw.dp, lat);
  return c;
}

}  // namespace

double layer_forward_flops(const ModelInfo& m, const LayerInfo& l, int64_t micro) {
  const double B = static_cast<double>(micro), T = static_cast<double>(m.seq_len);
  switch (l.kind) {
    case LayerKind::Block:
      return 24.0 * B * T * l.dim * l.dim_local + 2.0 * B * T * T * l.dim_local;
    case LayerKind::Head:
      return 2.0 * B * T * l.dim * l.vocab_local;
    case LayerKind::Linear:
      return 2.0 * B * l.in * l.out;
    default:
      return 0;
  }
}

TimePrediction predict_time(MemoryModel& memory, const Setup& s, const Rates& r, int nodes) {
  const layout::Layout& l = s.plan.layout;
  TANDEM_CHECK(nodes >= 1 && l.world() % nodes == 0, "planner: ", l.world(), " devices do not split over ", nodes,
               " nodes");
  const int per_node = l.world() / nodes;
  const Bandwidths bw{axis_spans_nodes(l, per_node, 't') ? r.inter_node_bus_bw : r.tp_bus_bw,
                      axis_spans_nodes(l, per_node, 'd') ? r.inter_node_bus_bw : r.dp_bus_bw,
                      axis_spans_nodes(l, per_node, 'p') ? r.inter_node_p2p_bw : r.pp_p2p_bw};
  const ModelInfo& m = memory.model(l.tp);
  const auto& chunks = memory.chunks(s.plan);
  const int v = s.plan.virtual_stages, stages = l.pp * v;
  const int zero = l.dp > 1 ? s.zero_stage : 0;
  const double mbs = static_cast<double>(s.micro_batches);

  std::vector<Shape> boundary{m.input_shape(s.micro_batch)};
  for (const auto& layer : m.model.layers()) boundary.push_back(layer->output_shape(boundary.back()));

  // Per pipeline rank: one micro-batch through all of its chunks, and its end-of-step work.
  struct RankCost {
    double compute = 0, tp = 0, pp = 0, dp = 0, end_dp = 0, optimizer = 0;
    double per_mb() const { return compute + tp + pp + dp; }
  };
  std::vector<RankCost> ranks(static_cast<size_t>(l.pp));
  for (int rank = 0; rank < l.pp; ++rank) {
    RankCost& rc = ranks[static_cast<size_t>(rank)];
    double owned = 0;
    for (int c = 0; c < v; ++c) {
      const int stage = pl::global_stage(rank, c, l.pp);
      const auto [first, last] = chunks[static_cast<size_t>(stage)];
      for (size_t i = first; i < last; ++i) {
        const LayerCost lc = layer_cost(m, i, boundary[i], s, r, bw, zero, l.dp);
        rc.compute += lc.compute_f + lc.compute_b;
        rc.tp += lc.tp_f + lc.tp_b;
        rc.dp += lc.dp_f + lc.dp_b;
        const int64_t n = m.layers[i].params, padded = (n + l.dp - 1) / l.dp * l.dp;
        owned += zero == 0 ? static_cast<double>(n) : static_cast<double>(std::min(n, padded / l.dp));
        // End of step (ParameterStore::reduce_gradients, refresh_values): fp32 gradients all-reduced (stage 0) or
        // reduce-scattered (1), the updated shards all-gathered in the compute dtype (1, 2).
        const double grads = static_cast<double>(padded) * 4, values = static_cast<double>(padded) * s.dtype_bytes;
        if (zero == 0) rc.end_dp += all_reduce_s(grads, l.dp, bw.dp, r.latency_s);
        if (zero == 1) rc.end_dp += scatter_or_gather_s(grads, l.dp, bw.dp, r.latency_s);
        if (zero == 1 || zero == 2) rc.end_dp += scatter_or_gather_s(values, l.dp, bw.dp, r.latency_s);
      }
      // Receives block: the activation arrives before forward, the gradient before backward.
      if (stage > 0) rc.pp += r.latency_s + shape_numel(boundary[first]) * s.dtype_bytes / bw.p2p;
      if (stage < stages - 1) rc.pp += r.latency_s + shape_numel(boundary[last]) * s.dtype_bytes / bw.p2p;
    }
    // AdamW reads value, gradient and two moments and writes three of them (28 B per element); the norm reads
    // the gradients once more.
    rc.optimizer = owned * 32 / r.memory_bw;
  }
  const RankCost& slow = *std::max_element(
      ranks.begin(), ranks.end(), [](const RankCost& a, const RankCost& b) { return a.per_mb() < b.per_mb(); });
  double end = 0, end_dp = 0, optimizer = 0;
  for (const RankCost& rc : ranks) {
    end = std::max(end, rc.end_dp + rc.optimizer);
    end_dp = std::max(end_dp, rc.end_dp);
    optimizer = std::max(optimizer, rc.optimizer);
  }

  TimePrediction t;
  const double fill = static_cast<double>(l.pp - 1) / v;  // micro-batch times of fill and drain
  t.compute_s = mbs * slow.compute;
  t.tp_s = mbs * slow.tp;
  t.pp_s = mbs * slow.pp;
  t.dp_s = mbs * slow.dp + end_dp;
  t.optimizer_s = optimizer;
  t.bubble_s = fill * slow.per_mb();
  t.bubble_fraction = fill / (mbs + fill);
  t.step_s = (mbs + fill) * slow.per_mb() + end;

  const double global = static_cast<double>(s.micro_batch) * mbs * l.dp;
  t.samples_per_s = global / t.step_s;
  t.tokens_per_s = t.samples_per_s * static_cast<double>(m.rows_per_sample());
  t.unit = m.type == "gpt" ? "tok/s" : "samples/s";
  const double n = static_cast<double>(m.logical_parameters);
  t.model_flops_per_step =
      m.type == "gpt" ? global * m.seq_len * (6 * n + 12.0 * m.blocks * m.dim * m.seq_len) : global * 6 * n;
  t.model_flops_per_device_s = t.model_flops_per_step / t.step_s / l.world();
  return t;
}

}  // namespace tandem::plan
