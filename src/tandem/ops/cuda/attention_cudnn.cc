// cuDNN's grouped-query attention graphs (attention_cudnn_graphs.h): built, cached and run whole, forward and
// backward, and the workspace the planner counts (the blocked backward's whole scratch where it runs in blocks).
#include "tandem/ops/cuda/attention_cudnn.h"

#if TANDEM_HAVE_CUDNN_FRONTEND
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "tandem/ops/cuda/attention_cudnn_graphs.h"
#endif
#include "tandem/ops/cuda/scratch_sizes.h"

#if TANDEM_HAVE_CUDNN_FRONTEND
namespace tandem::ops::cuda::cudnn_attention {
namespace {

std::vector<int64_t> qkv_strides(const GqaShape& s) { return {s.t * s.width(), s.d, s.width(), 1}; }
std::vector<int64_t> y_strides(const GqaShape& s) { return {s.t * s.h * s.d, s.d, s.h * s.d, 1}; }
// A block's statistic is a packed copy of its rows (scratch_sizes.h: cuDNN before 9.26 takes no strided one).
std::vector<int64_t> stats_strides(const GqaShape& s) { return {s.graph_h() * s.q_rows(), s.q_rows(), 1, 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, int64_t uid,
                                                    std::vector<int64_t> dims, std::vector<int64_t> strides) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(std::move(dims))
                      .set_stride(std::move(strides)));
}

std::shared_ptr<fe::graph::Tensor_attributes> q_tensor(fe::graph::Graph& g, const GqaShape& s) {
  return input(g, "q", kQ, {s.b, s.graph_h(), s.q_rows(), s.d}, qkv_strides(s));
}
std::shared_ptr<fe::graph::Tensor_attributes> kv_tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                        const GqaShape& s) {
  return input(g, name, uid, {s.b, s.graph_kv(), s.keys(), s.d}, qkv_strides(s));
}

// Runs the build steps; the first failure's message, or "" when the graph is ready.
std::string finish_graph(fe::graph::Graph& g, cudnnHandle_t handle) {
  auto step = [](fe::error_t status, const char* what) -> std::string {
    return status.is_good() ? std::string() : std::string(what) + ": " + status.get_message();
  };
  std::string why = step(g.validate(), "validate");
  if (why.empty()) why = step(g.build_operation_graph(handle), "build_operation_graph");
  if (why.empty()) why = step(g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  if (why.empty()) why = step(g.check_support(), "check_support");
  if (why.empty()) why = step(g.build_plans(), "build_plans");
  return why;
}

fe::DataType_t io_type(DType t) { return t == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

std::shared_ptr<fe::graph::Graph> new_graph(DType t) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(t))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

using Built = std::pair<std::shared_ptr<fe::graph::Graph>, std::string>;

Built build_forward(const GqaShape& s, DType t, cudnnHandle_t handle) {
  auto g = new_graph(t);
  auto q = q_tensor(*g, s);
  auto k = kv_tensor(*g, "k", kK, s);
  auto v = kv_tensor(*g, "v", kV, s);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_gqa_attention")
                     .set_generate_stats(true)
                     .set_attn_scale(1.0f / std::sqrt(static_cast<float>(s.d)))
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0);  // key j <= query i: the causal mask
  auto [o, stats] = g->sdpa(q, k, v, options);
  o->set_output(true).set_uid(kO).set_dim({s.b, s.h, s.t, s.d}).set_stride(y_strides(s));
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({s.b, s.h, s.t, 1})
      .set_stride(stats_strides(s));
  std::string why = finish_graph(*g, handle);
  return {why.empty() ? g : nullptr, why};
}

Built build_backward(const GqaShape& s, DType t, cudnnHandle_t handle, bool deterministic) {
  auto g = new_graph(t);
  auto q = q_tensor(*g, s);
  auto k = kv_tensor(*g, "k", kK, s);
  auto v = kv_tensor(*g, "v", kV, s);
  auto o = input(*g, "o", kO, {s.b, s.graph_h(), s.q_rows(), s.d}, y_strides(s));
  auto d_o = input(*g, "dO", kDO, {s.b, s.graph_h(), s.q_rows(), s.d}, y_strides(s));
  auto stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("stats")
                             .set_uid(kStats)
                             .set_dim({s.b, s.graph_h(), s.q_rows(), 1})
                             .set_stride(stats_strides(s))
                             .set_data_type(fe::DataType_t::FLOAT));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_gqa_attention_backward")
                     .set_attn_scale(1.0f / std::sqrt(static_cast<float>(s.d)))
                     .set_deterministic_algorithm(deterministic);
  if (s.part != kBefore)  // the causal mask: at the bottom right of a whole block, else at the top left
    options
        .set_diagonal_alignment(s.rows && s.part == kWholeBlock ? fe::DiagonalAlignment_t::BOTTOM_RIGHT
                                                                : fe::DiagonalAlignment_t::TOP_LEFT)
        .set_diagonal_band_right_bound(0);
  if (s.rows && s.part != kDiagonal) {
    auto length = [&](const char* name, int64_t uid) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({s.b, 1, 1, 1})
                           .set_stride({1, 1, 1, 1})
                           .set_data_type(fe::DataType_t::INT32));
    };
    options.set_padding_mask(true).set_seq_len_q(length("seq_q", kSeqQ)).set_seq_len_kv(length("seq_kv", kSeqKv));
  }
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, options);
  const std::vector<int64_t> beside = {s.rows * s.h * s.d, s.d, s.h * s.d, 1};  // the (B, rows, H D) dq beside
  dq->set_output(true)
      .set_uid(kDQ)
      .set_dim({s.b, s.graph_h(), s.q_rows(), s.d})
      .set_stride(s.part == kDiagonal ? beside : qkv_strides(s));
  dk->set_output(true).set_uid(kDK).set_dim({s.b, s.graph_kv(), s.keys(), s.d}).set_stride(qkv_strides(s));
  dv->set_output(true).set_uid(kDV).set_dim({s.b, s.graph_kv(), s.keys(), s.d}).set_stride(qkv_strides(s));
  std::string why = finish_graph(*g, handle);
  return {why.empty() ? g : nullptr, why};
}

}  // namespace

std::string shape_text(const GqaShape& s, DType t) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "(B=%lld, H=%lld, Hkv=%lld, T=%lld, D=%lld) %s", static_cast<long long>(s.b),
                static_cast<long long>(s.h), static_cast<long long>(s.kv), static_cast<long long>(s.t),
                static_cast<long long>(s.d), dtype_name(t).c_str());
  std::string text = buf;
  if (s.rows) text += ", blocks of " + std::to_string(s.rows) + " query rows";
  if (s.groups > 1) text += ", the heads in " + std::to_string(s.groups) + " groups";
  if (s.part == kBefore) text += ", against the keys before them";
  if (s.part == kDiagonal) text += ", their diagonal square";
  return text;
}

const CachedGraph& graph_for(GqaAttentionContext& ctx, bool backward, const GqaShape& s, DType t) {
  const GraphKey key{backward, static_cast<int64_t>(t), s.b, s.h, s.kv, s.t, s.rows, s.d, s.groups, s.part};
  auto it = ctx.graphs.find(key);
  if (it != ctx.graphs.end()) return it->second;
  Built built;
  if (backward) {
    // Deterministic first (the project's rule: same bits every run); the other algorithm only if that one is missing.
    built = build_backward(s, t, ctx.handle, ctx.deterministic);
    if (!built.first && ctx.deterministic) {
      Built second = build_backward(s, t, ctx.handle, false);
      if (second.first) {
        std::fprintf(stderr,
                     "tandem: cuDNN has no deterministic grouped-query attention backward for %s (%s); using the "
                     "non-deterministic one\n",
                     shape_text(s, t).c_str(), built.second.c_str());
      }
      built = std::move(second);
    }
  } else {
    built = build_forward(s, t, ctx.handle);
  }
  CachedGraph entry;
  if (built.first) {
    entry.graph = built.first;
    TANDEM_CHECK(entry.graph->get_workspace_size(entry.workspace).is_good(),
                 "cuDNN grouped-query attention workspace size");
  } else {
    std::fprintf(stderr,
                 "tandem: cuDNN fused attention cannot run grouped-query %s %s: %s; using the plain (slow) kernels\n",
                 backward ? "backward" : "forward", shape_text(s, t).c_str(), built.second.c_str());
  }
  return ctx.graphs.emplace(key, std::move(entry)).first->second;
}

bool cudnn_can_take(DType t, std::initializer_list<const void*> pointers, const GqaShape& s) {
  if (!cudnn_attention_shape(t, s.d, s.width())) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

void run(GqaAttentionContext& ctx, const CachedGraph& entry, device::CudaDevice& dev,
         std::unordered_map<int64_t, void*>& pack) {
  Tensor workspace;
  void* ws = nullptr;
  if (entry.workspace > 0) {
    workspace = Tensor::empty({(entry.workspace + 3) / 4}, DType::F32, dev, "cuDNN attention workspace");
    ws = workspace.raw();
  }
  const fe::error_t status = entry.graph->execute(ctx.handle, pack, ws);
  TANDEM_CHECK(status.is_good(), "cuDNN grouped-query attention execute failed: ", status.err_msg);
  // The workspace goes back to the arena now; the next user is queued after this graph on the compute stream.
}

}  // namespace tandem::ops::cuda::cudnn_attention
#endif  // TANDEM_HAVE_CUDNN_FRONTEND

namespace tandem::ops::cuda {

#if TANDEM_HAVE_CUDNN_FRONTEND
using namespace cudnn_attention;

namespace {

// The forward's operands, which the backward's pack holds too (then with dO and the gradients).
std::unordered_map<int64_t, void*> forward_pack(const GqaShape& s, const Tensor& qkv, const Tensor& y,
                                                const Tensor& lse) {
  return {{kQ, qkv.raw()},
          {kK, offset(qkv, k_offset(s))},
          {kV, offset(qkv, v_offset(s))},
          {kO, y.raw()},
          {kStats, lse.raw()}};
}

// The backward's blocks: the rule's for `block_bytes` where it is deterministic, else one (the whole graph).
CudnnAttentionBlocks backward_blocks(const GqaAttentionContext& ctx, const GqaShape& s, int64_t block_bytes) {
  return ctx.deterministic ? cudnn_attention_blocking(s.b, s.h, s.kv, s.t, s.d, attention_block_bytes(block_bytes))
                           : CudnnAttentionBlocks{s.t, 1};
}

}  // namespace

CudnnAttention cudnn_attention_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse) {
  const GqaShape s = shape_of(qkv, heads, kv_heads);
  if (s.b == 0 || s.t == 0 || s.d == 0 || y.dtype() != qkv.dtype() || lse.dtype() != DType::F32 ||
      !cudnn_can_take(qkv.dtype(), {qkv.raw(), y.raw(), lse.raw(), offset(qkv, k_offset(s)), offset(qkv, v_offset(s))},
                      s))
    return CudnnAttention::NotTaken;
  device::CudaDevice& dev = cuda_device(y);
  GqaAttentionContext& ctx = dev.context<GqaAttentionContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  const CachedGraph& entry = graph_for(ctx, false, s, qkv.dtype());
  if (!entry.graph) return CudnnAttention::NotTaken;
  std::unordered_map<int64_t, void*> pack = forward_pack(s, qkv, y, lse);
  run(ctx, entry, dev, pack);
  return CudnnAttention::Ran;
}

CudnnAttention cudnn_attention_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                                        const Tensor& dy, const Tensor& dqkv, int64_t block_bytes) {
  const GqaShape s = shape_of(qkv, heads, kv_heads);
  const bool same = y.dtype() == qkv.dtype() && dy.dtype() == qkv.dtype() && dqkv.dtype() == qkv.dtype();
  if (s.b == 0 || s.t == 0 || s.d == 0 || !same || lse.dtype() != DType::F32 ||
      !cudnn_can_take(qkv.dtype(),
                      {qkv.raw(), y.raw(), lse.raw(), dy.raw(), dqkv.raw(), offset(qkv, k_offset(s)),
                       offset(qkv, v_offset(s)), offset(dqkv, k_offset(s)), offset(dqkv, v_offset(s))},
                      s))
    return CudnnAttention::NotTaken;
  device::CudaDevice& dev = cuda_device(dqkv);
  GqaAttentionContext& ctx = dev.context<GqaAttentionContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  const CudnnAttentionBlocks blocks = backward_blocks(ctx, s, block_bytes);
  if (blocks.rows > 0 && blocks.rows < s.t)
    return backward_in_blocks(ctx, dev, s, blocks, qkv, y, lse, dy, dqkv) ? CudnnAttention::Ran
                                                                          : CudnnAttention::NoBlocks;
  const CachedGraph& entry = graph_for(ctx, true, s, qkv.dtype());
  if (!entry.graph) return CudnnAttention::NotTaken;
  std::unordered_map<int64_t, void*> pack = forward_pack(s, qkv, y, lse);
  pack.insert({{kDO, dy.raw()}, {kDQ, dqkv.raw()}, {kDK, offset(dqkv, k_offset(s))}, {kDV, offset(dqkv, v_offset(s))}});
  run(ctx, entry, dev, pack);
  return CudnnAttention::Ran;
}

int64_t attention_gqa_cudnn_workspace_bytes(Device* device, const Tensor& qkv, int heads, int kv_heads, bool backward,
                                            int64_t block_bytes) {
  auto* dev = dynamic_cast<device::CudaDevice*>(device);
  const GqaShape s = shape_of(qkv, heads, kv_heads);
  // The pointers of a planned run are not known; the engine's buffers are 16-byte aligned, as cuDNN wants.
  if (!dev || s.b == 0 || s.t == 0 || s.d == 0 || !cudnn_can_take(qkv.dtype(), {}, s) ||
      attention_uses_flash(qkv.dtype(), s.b, s.h, s.kv, s.t, s.d, false, block_bytes))
    return 0;
  GqaAttentionContext& ctx = dev->context<GqaAttentionContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  const CudnnAttentionBlocks blocks = backward ? backward_blocks(ctx, s, block_bytes) : CudnnAttentionBlocks{s.t, 1};
  if (blocks.rows > 0 && blocks.rows < s.t) {
    const BlockGraphs g = block_graphs(ctx, s, qkv.dtype(), blocks);
    return g.widest < 0 ? 0 : cudnn_attention_blocked_scratch(g.widest, blocks.rows, s.b, s.h, s.kv, s.t, s.d, g.split);
  }
  const CachedGraph& entry = graph_for(ctx, backward, s, qkv.dtype());
  return entry.graph ? (entry.workspace + 3) / 4 * 4 : 0;
}

#else
CudnnAttention cudnn_attention_forward(const Tensor&, int, int, const Tensor&, const Tensor&) {
  return CudnnAttention::NotTaken;
}
CudnnAttention cudnn_attention_backward(const Tensor&, int, int, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, int64_t) {
  return CudnnAttention::NotTaken;
}
int64_t attention_gqa_cudnn_workspace_bytes(Device*, const Tensor&, int, int, bool, int64_t) { return 0; }
#endif

}  // namespace tandem::ops::cuda
