// CUDA causal self-attention: cuDNN's fused flash attention (SDPA forward and backward graphs through the
// cudnn-frontend headers) for bf16 and f16, and the plain kernels (attention.cu) for f32 and for shapes cuDNN
// cannot run. Graphs are built once per shape and cached in a per-device context.
//
// No copies around cuDNN: q, k and v are strided (B, H, T, D) views of the fused qkv (B, T, 3C) buffer (strides
// T*3C, D, 3C, 1; k and v start C and 2C elements in), y and dy are (B, H, T, D) views of (B, T, C) (strides T*C, D,
// C, 1), dq|dk|dv are written straight into dqkv with qkv's strides, and lse (B, H, T) is cuDNN's fp32 "stats"
// output (the natural-log log-sum-exp of the scaled scores) as a (B, H, T, 1) tensor.
#include <cmath>
#include <cstdio>

#include "tandem/ops/cuda/attention_plain.h"
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"

#if TANDEM_HAVE_CUDNN_FRONTEND
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>
#endif

namespace tandem::ops::cuda {

#if TANDEM_HAVE_CUDNN_FRONTEND
namespace {

namespace fe = cudnn_frontend;

// Tensor uids in the variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// (backward, dtype, B, H, T, D)
using GraphKey = std::array<int64_t, 6>;

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;  // null when cuDNN cannot run this shape
  int64_t workspace = 0;
};

struct AttentionContext {
  explicit AttentionContext(device::CudaDevice& dev) {
    TANDEM_CUDNN_CHECK(cudnnCreate(&handle));
    TANDEM_CUDNN_CHECK(cudnnSetStream(handle, dev.compute_stream()));
  }
  ~AttentionContext() {
    graphs.clear();
    if (handle) cudnnDestroy(handle);
  }
  AttentionContext(const AttentionContext&) = delete;
  AttentionContext& operator=(const AttentionContext&) = delete;

  cudnnHandle_t handle = nullptr;
  std::map<GraphKey, CachedGraph> graphs;
  std::mutex mu;
};

struct Shape4 {
  int64_t b, h, t, d, c;
};

Shape4 shape_of(const Tensor& qkv, int heads) {
  const int64_t c = qkv.dim(2) / 3;
  return Shape4{qkv.dim(0), heads, qkv.dim(1), c / heads, c};
}

std::shared_ptr<fe::graph::Tensor_attributes> qkv_tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                         const Shape4& s) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({s.b, s.h, s.t, s.d})
                      .set_stride({s.t * 3 * s.c, s.d, 3 * s.c, 1}));
}

std::vector<int64_t> y_strides(const Shape4& s) { return {s.t * s.c, s.d, s.c, 1}; }
std::vector<int64_t> stats_strides(const Shape4& s) { return {s.h * s.t, s.t, 1, 1}; }

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

std::pair<std::shared_ptr<fe::graph::Graph>, std::string> build_forward(const Shape4& s, DType t,
                                                                        cudnnHandle_t handle) {
  auto g = new_graph(t);
  auto q = qkv_tensor(*g, "q", kQ, s);
  auto k = qkv_tensor(*g, "k", kK, s);
  auto v = qkv_tensor(*g, "v", kV, s);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_attention")
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

std::pair<std::shared_ptr<fe::graph::Graph>, std::string> build_backward(const Shape4& s, DType t, cudnnHandle_t handle,
                                                                         bool deterministic) {
  auto g = new_graph(t);
  auto q = qkv_tensor(*g, "q", kQ, s);
  auto k = qkv_tensor(*g, "k", kK, s);
  auto v = qkv_tensor(*g, "v", kV, s);
  auto o = g->tensor(
      fe::graph::Tensor_attributes().set_name("o").set_uid(kO).set_dim({s.b, s.h, s.t, s.d}).set_stride(y_strides(s)));
  auto d_o = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("dO")
                           .set_uid(kDO)
                           .set_dim({s.b, s.h, s.t, s.d})
                           .set_stride(y_strides(s)));
  auto stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("stats")
                             .set_uid(kStats)
                             .set_dim({s.b, s.h, s.t, 1})
                             .set_stride(stats_strides(s))
                             .set_data_type(fe::DataType_t::FLOAT));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_attention_backward")
                     .set_attn_scale(1.0f / std::sqrt(static_cast<float>(s.d)))
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0)
                     .set_deterministic_algorithm(deterministic);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, options);
  const std::vector<int64_t> dims{s.b, s.h, s.t, s.d}, strides{s.t * 3 * s.c, s.d, 3 * s.c, 1};
  dq->set_output(true).set_uid(kDQ).set_dim(dims).set_stride(strides);
  dk->set_output(true).set_uid(kDK).set_dim(dims).set_stride(strides);
  dv->set_output(true).set_uid(kDV).set_dim(dims).set_stride(strides);
  std::string why = finish_graph(*g, handle);
  return {why.empty() ? g : nullptr, why};
}

// The cached graph for this shape, built on first use; null graph when cuDNN cannot run it (reported once).
const CachedGraph& graph_for(AttentionContext& ctx, bool backward, const Shape4& s, DType t) {
  const GraphKey key{backward, static_cast<int64_t>(t), s.b, s.h, s.t, s.d};
  auto it = ctx.graphs.find(key);
  if (it != ctx.graphs.end()) return it->second;
  std::pair<std::shared_ptr<fe::graph::Graph>, std::string> built;
  if (backward) {
    // Deterministic first (the project's rule: same bits every run); the other algorithm only if that one is missing.
    built = build_backward(s, t, ctx.handle, true);
    if (!built.first) {
      auto second = build_backward(s, t, ctx.handle, false);
      if (second.first) {
        std::fprintf(stderr,
                     "tandem: cuDNN has no deterministic attention backward for (B=%lld, H=%lld, T=%lld, D=%lld) %s "
                     "(%s); using the non-deterministic one\n",
                     static_cast<long long>(s.b), static_cast<long long>(s.h), static_cast<long long>(s.t),
                     static_cast<long long>(s.d), dtype_name(t).c_str(), built.second.c_str());
      }
      built = std::move(second);
    }
  } else {
    built = build_forward(s, t, ctx.handle);
  }
  CachedGraph entry;
  if (built.first) {
    entry.graph = built.first;
    TANDEM_CHECK(entry.graph->get_workspace_size(entry.workspace).is_good(), "cuDNN attention workspace size");
  } else {
    std::fprintf(stderr,
                 "tandem: cuDNN fused attention cannot run %s (B=%lld, H=%lld, T=%lld, D=%lld) %s: %s; using the "
                 "plain (slow) kernels\n",
                 backward ? "backward" : "forward", static_cast<long long>(s.b), static_cast<long long>(s.h),
                 static_cast<long long>(s.t), static_cast<long long>(s.d), dtype_name(t).c_str(), built.second.c_str());
  }
  return ctx.graphs.emplace(key, std::move(entry)).first->second;
}

// cuDNN wants every operand on a 16-byte boundary (q, k and v start inside one row of qkv).
bool cudnn_can_take(const Tensor& qkv, std::initializer_list<const void*> pointers, const Shape4& s) {
  if (qkv.dtype() != DType::BF16 && qkv.dtype() != DType::F16) return false;
  if (s.d % 8 != 0 || s.c % 8 != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

void run(AttentionContext& ctx, const CachedGraph& entry, device::CudaDevice& dev,
         std::unordered_map<int64_t, void*>& pack) {
  Tensor workspace;
  void* ws = nullptr;
  if (entry.workspace > 0) {
    workspace = Tensor::empty({(entry.workspace + 3) / 4}, DType::F32, dev, "cuDNN attention workspace");
    ws = workspace.raw();
  }
  const fe::error_t status = entry.graph->execute(ctx.handle, pack, ws);
  TANDEM_CHECK(status.is_good(), "cuDNN attention execute failed: ", status.err_msg);
  // The workspace goes back to the arena now; the next user is queued after this graph on the compute stream.
}

char* offset(const Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace
#endif  // TANDEM_HAVE_CUDNN_FRONTEND

void attention_forward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse) {
#if TANDEM_HAVE_CUDNN_FRONTEND
  const Shape4 s = shape_of(qkv, heads);
  if (s.b > 0 && s.t > 0 && s.d > 0 && y.dtype() == qkv.dtype() && lse.dtype() == DType::F32 &&
      cudnn_can_take(qkv, {qkv.raw(), y.raw(), lse.raw(), offset(qkv, s.c)}, s)) {
    device::CudaDevice& dev = cuda_device(y);
    AttentionContext& ctx = dev.context<AttentionContext>();
    std::lock_guard<std::mutex> lock(ctx.mu);
    const CachedGraph& entry = graph_for(ctx, false, s, qkv.dtype());
    if (entry.graph) {
      std::unordered_map<int64_t, void*> pack{
          {kQ, qkv.raw()}, {kK, offset(qkv, s.c)}, {kV, offset(qkv, 2 * s.c)}, {kO, y.raw()}, {kStats, lse.raw()}};
      run(ctx, entry, dev, pack);
      return;
    }
  }
#endif
  attention_forward_plain(qkv, heads, y, lse);
}

void attention_backward(const Tensor& qkv, int heads, const Tensor& y, const Tensor& lse, const Tensor& dy,
                        const Tensor& dqkv) {
#if TANDEM_HAVE_CUDNN_FRONTEND
  const Shape4 s = shape_of(qkv, heads);
  const bool same = y.dtype() == qkv.dtype() && dy.dtype() == qkv.dtype() && dqkv.dtype() == qkv.dtype();
  if (s.b > 0 && s.t > 0 && s.d > 0 && same && lse.dtype() == DType::F32 &&
      cudnn_can_take(qkv, {qkv.raw(), y.raw(), lse.raw(), dy.raw(), dqkv.raw(), offset(qkv, s.c)}, s)) {
    device::CudaDevice& dev = cuda_device(dqkv);
    AttentionContext& ctx = dev.context<AttentionContext>();
    std::lock_guard<std::mutex> lock(ctx.mu);
    const CachedGraph& entry = graph_for(ctx, true, s, qkv.dtype());
    if (entry.graph) {
      std::unordered_map<int64_t, void*> pack{
          {kQ, qkv.raw()},   {kK, offset(qkv, s.c)},   {kV, offset(qkv, 2 * s.c)},
          {kO, y.raw()},     {kDO, dy.raw()},          {kStats, lse.raw()},
          {kDQ, dqkv.raw()}, {kDK, offset(dqkv, s.c)}, {kDV, offset(dqkv, 2 * s.c)}};
      run(ctx, entry, dev, pack);
      return;
    }
  }
#endif
  attention_backward_plain(qkv, heads, y, lse, dy, dqkv);
}

}  // namespace tandem::ops::cuda
