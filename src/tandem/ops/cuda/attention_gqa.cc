// CUDA causal grouped-query self-attention (ops.h): cuDNN's fused flash attention (SDPA forward and backward graphs
// through the cudnn-frontend headers, which take H query heads over Hkv key/value heads and sum dk and dv over each
// group) for bf16 and f16, our flash kernels (attention_flash.h: memory linear in T) where cuDNN's deterministic
// backward would want too much workspace and for attention kept inside documents, and the plain kernels
// (attention_gqa.cu) for f32 and for shapes or alignments neither takes. One rule picks the path per shape,
// attention_uses_flash (scratch_sizes.h), which the planner's estimates follow too; the forward and the backward of
// a shape take the same one. Graphs are built once per shape and cached in a per-device context of their own.
// Multi-head attention (ops.h's attention_forward / attention_backward) reaches it as the case Hkv = H: the same
// fused qkv layout.
//
// No copies around cuDNN: with W = (H + 2 Hkv) D, q is a (B, H, T, D) view of the fused qkv (B, T, W) buffer with
// strides (T*W, D, W, 1), k and v (B, Hkv, T, D) views with the same strides starting H*D and (H + Hkv) D elements
// in; y and dy are (B, H, T, D) views of (B, T, H*D) (strides T*H*D, D, H*D, 1); dq, dk and dv are written straight
// into dqkv with qkv's strides; lse (B, H, T) is cuDNN's fp32 "stats" output as a (B, H, T, 1) tensor.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tandem/ops/cuda/attention_blocks.h"
#include "tandem/ops/cuda/attention_flash.h"
#include "tandem/ops/cuda/attention_gqa_plain.h"
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/scratch_sizes.h"

#if TANDEM_HAVE_CUDNN_FRONTEND
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
#endif

namespace tandem::ops::cuda {

#if TANDEM_HAVE_CUDNN_FRONTEND
namespace {

namespace fe = cudnn_frontend;

// Tensor uids in the variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeqQ, kSeqKv };

// (backward, dtype, B, H, Hkv, T, rows, D, head groups, block part)
using GraphKey = std::array<int64_t, 10>;

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;  // null when cuDNN cannot run this shape
  int64_t workspace = 0;
};

// One cuDNN handle on the compute stream and the graphs built so far, per device. The backward is cuDNN's
// deterministic algorithm (the same bits every run), unless TANDEM_NONDETERMINISTIC_ATTENTION=1 is in the
// environment: then the other one, which is not, to measure what the rule costs.
struct GqaAttentionContext {
  explicit GqaAttentionContext(device::CudaDevice& dev) {
    TANDEM_CUDNN_CHECK(cudnnCreate(&handle));
    TANDEM_CUDNN_CHECK(cudnnSetStream(handle, dev.compute_stream()));
    deterministic = attention_deterministic();
  }
  ~GqaAttentionContext() {
    graphs.clear();
    if (handle) cudnnDestroy(handle);
  }
  GqaAttentionContext(const GqaAttentionContext&) = delete;
  GqaAttentionContext& operator=(const GqaAttentionContext&) = delete;

  cudnnHandle_t handle = nullptr;
  bool deterministic = true;
  std::map<GraphKey, CachedGraph> graphs;
  std::mutex mu;
};

// The whole attention (rows 0), or the backward's graph for blocks of `rows` query rows (scratch_sizes.h): queries
// [keys - rows, keys) against keys [0, keys), the causal mask aligned to the bottom right, the graph's keys all T and
// each block's own given at run time (cuDNN's padding mask: per batch element, the query and key lengths). A block's
// graph may take one of `groups` groups of the heads, H / groups query heads over Hkv / groups kv heads, run in turn
// (scratch_sizes.h). The buffers keep their (B, T, ...) strides either way. A split block (scratch_sizes.h) runs two
// graphs of its own parts: its rows against the keys before them (kBefore: no mask, the keys cut by the padding mask)
// and its diagonal square (kDiagonal: `rows` keys from the block's first, the causal mask at the top left, dq written
// to a (B, rows, H D) buffer beside).
enum BlockPart : int64_t { kWholeBlock = 0, kBefore = 1, kDiagonal = 2 };
struct GqaShape {
  int64_t b, h, kv, t, d;
  int64_t rows = 0;
  int64_t groups = 1;
  int64_t part = kWholeBlock;
  int64_t width() const { return (h + 2 * kv) * d; }  // W
  int64_t q_rows() const { return rows ? rows : t; }
  int64_t keys() const { return part == kDiagonal ? rows : t; }  // the graph's keys
  int64_t graph_h() const { return h / groups; }                 // the query heads one graph takes
  int64_t graph_kv() const { return kv / groups; }               // and its kv heads
};

GqaShape shape_of(const Tensor& qkv, int heads, int kv_heads) {
  const int64_t d = qkv.dim(2) / (heads + 2 * static_cast<int64_t>(kv_heads));
  return GqaShape{qkv.dim(0), heads, kv_heads, qkv.dim(1), d};
}

// Element offsets of k and v in a row of qkv.
int64_t k_offset(const GqaShape& s) { return s.h * s.d; }
int64_t v_offset(const GqaShape& s) { return (s.h + s.kv) * s.d; }

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

// The cached graph for this shape, built on first use; null graph when cuDNN cannot run it (reported once).
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

// cuDNN wants the shapes of cudnn_attention_shape (scratch_sizes.h) and every operand on a 16-byte boundary (q, k
// and v start inside one row of qkv).
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

char* offset(const Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}

// The blocked backward's graphs (scratch_sizes.h), built on first use, each over one of `b.groups` head groups:
// those of a whole-height block (`before` and `diagonal` where it is split, else `full`: the bottom-right mask) and of
// a shorter last block if T needs one (`last`, bottom-right). `widest` is the largest workspace of those that run, -1
// when cuDNN cannot run them. A split that cuDNN cannot build runs unsplit.
struct BlockGraphs {
  const CachedGraph *full = nullptr, *last = nullptr, *before = nullptr, *diagonal = nullptr;
  bool split = false;
  int64_t widest = -1;
};

BlockGraphs block_graphs(GqaAttentionContext& ctx, const GqaShape& s, DType t, const CudnnAttentionBlocks& b) {
  BlockGraphs g;
  GqaShape block = s;
  block.rows = b.rows;
  block.groups = b.groups;
  int64_t widest = 0;
  auto use = [&](const CachedGraph* c) {
    if (!c->graph) return false;
    widest = std::max(widest, c->workspace);
    return true;
  };
  if (b.split) {
    block.part = kBefore;
    g.before = &graph_for(ctx, true, block, t);
    block.part = kDiagonal;
    g.diagonal = &graph_for(ctx, true, block, t);
    g.split = g.before->graph && g.diagonal->graph;
    block.part = kWholeBlock;
  }
  if (g.split) {
    use(g.before);
    use(g.diagonal);
  } else {
    g.full = &graph_for(ctx, true, block, t);
    if (!use(g.full)) return g;
  }
  const int64_t tail = s.t - (cudnn_attention_blocks(b.rows, s.t) - 1) * b.rows;
  if (tail < b.rows) {
    block.rows = tail;
    g.last = &graph_for(ctx, true, block, t);
    if (!use(g.last)) return g;
  } else {
    g.last = g.full;
  }
  g.widest = widest;
  return g;
}

// The deterministic backward in blocks of query rows (scratch_sizes.h), head group after head group: each block's dq
// rows go into dqkv (a split block's two parts' added there in f32), its dk and dv (keys [0, a + rows)) into dqkv's k
// and v columns, summed into an f32 accumulator in block order; the last block's are added to the sums and rounded
// into dqkv. One allocation holds the widest graph's workspace, the dq beside and the accumulator. False when cuDNN
// cannot run a block (nothing written).
bool backward_in_blocks(GqaAttentionContext& ctx, device::CudaDevice& dev, const GqaShape& s,
                        const CudnnAttentionBlocks& shape, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const Tensor& dy, const Tensor& dqkv) {
  const BlockGraphs graphs = block_graphs(ctx, s, qkv.dtype(), shape);
  if (graphs.widest < 0) return false;
  const int64_t rows = shape.rows, blocks = cudnn_attention_blocks(rows, s.t);
  const int64_t gh = s.h / shape.groups, gkv = s.kv / shape.groups;  // one graph's heads
  const CudnnAttentionBlockedScratch at =
      cudnn_attention_blocked_scratch_layout(graphs.widest, rows, s.b, s.h, s.kv, s.t, s.d, graphs.split);
  Tensor scratch = Tensor::empty({at.bytes / 4}, DType::F32, dev,
                                 "cuDNN attention backward blocks: workspace, statistic rows, lengths, dq, dk dv sums");
  char* ws = static_cast<char*>(scratch.raw());
  char* stats = ws + at.stats;
  auto* lengths = reinterpret_cast<int32_t*>(ws + at.lengths);
  char* beside = ws + at.beside;
  TANDEM_CUDA_CHECK(attention_blocks_lengths(lengths, s.b, s.t, rows, graphs.split, dev.compute_stream()));
  const BlockSums sums{reinterpret_cast<float*>(ws + at.sums),
                       offset(dqkv, k_offset(s)),
                       s.b,
                       s.t,
                       2 * s.kv * s.d,
                       s.width(),
                       qkv.dtype() == DType::F16};
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t a = i * rows, n = std::min(rows, s.t - a);
    const bool final_block = i + 1 == blocks, parts = graphs.split && n == rows;
    for (int64_t g = 0; g < shape.groups; ++g) {
      // The block's rows of the group's lse (B, H, T) packed as (B, gh, n).
      for (int64_t e = 0; e < s.b; ++e)
        TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(stats + 4 * e * gh * n, n * 4,
                                            static_cast<char*>(lse.raw()) + 4 * ((e * s.h + g * gh) * s.t + a), s.t * 4,
                                            n * 4, gh, cudaMemcpyDeviceToDevice, dev.compute_stream()));
      const int64_t q = g * gh * s.d, k = g * gkv * s.d;  // the group's first q and k (or v) column
      // Runs one graph of the block: its dq at `dq`, its keys (and their dk, dv) from row `from`.
      auto execute = [&](const CachedGraph* graph, void* dq, int64_t from) {
        const int64_t kv_at = from * s.width() + k;
        std::unordered_map<int64_t, void*> pack{{kQ, offset(qkv, a * s.width() + q)},
                                                {kK, offset(qkv, kv_at + k_offset(s))},
                                                {kV, offset(qkv, kv_at + v_offset(s))},
                                                {kO, offset(y, a * s.h * s.d + q)},
                                                {kDO, offset(dy, a * s.h * s.d + q)},
                                                {kStats, stats},
                                                {kDQ, dq},
                                                {kDK, offset(dqkv, kv_at + k_offset(s))},
                                                {kDV, offset(dqkv, kv_at + v_offset(s))}};
        if (graph != graphs.diagonal)  // the padding mask's lengths (the diagonal square has none)
          pack.insert({{kSeqQ, lengths + 2 * s.b * i}, {kSeqKv, lengths + 2 * s.b * i + s.b}});
        const fe::error_t status = graph->graph->execute(ctx.handle, pack, ws);
        TANDEM_CHECK(status.is_good(), "cuDNN grouped-query attention backward (a block) failed: ", status.err_msg);
      };
      void* dq = offset(dqkv, a * s.width() + q);
      if (!parts) {
        execute(final_block ? graphs.last : graphs.full, dq, 0);
      } else {
        if (a > 0) execute(graphs.before, dq, 0);  // the keys before the block; the first block has none
        execute(graphs.diagonal, beside + dtype_size(qkv.dtype()) * q, a);
      }
    }
    if (parts)
      TANDEM_CUDA_CHECK(attention_blocks_add_dq(dqkv.raw(), beside, s.b, s.t, s.width(), s.h * s.d, a, rows, sums.f16,
                                                dev.compute_stream()));
    TANDEM_CUDA_CHECK(final_block ? attention_blocks_finish(sums, a, dev.compute_stream())
                                  : attention_blocks_add(sums, a + n, a, dev.compute_stream()));
  }
  return true;
}

}  // namespace
#endif  // TANDEM_HAVE_CUDNN_FRONTEND

namespace {

FlashDims flash_dims(const Tensor& qkv, int heads, int kv_heads) {
  const int64_t d = qkv.dim(2) / (heads + 2 * static_cast<int64_t>(kv_heads));
  return FlashDims{qkv.dim(0), qkv.dim(1), heads, kv_heads, static_cast<int>(d)};
}

// Whether this call runs the flash kernels: the rule (scratch_sizes.h) says so for its shape, every operand has qkv's
// dtype, the grid takes the shape, and the pointers sit on 16-byte boundaries (else the plain kernels run; their lse
// is the flash kernels' too, so a forward and a backward that split across the two still agree).
bool flash_runs(const FlashDims& s, bool documents, std::initializer_list<const Tensor*> operands,
                std::initializer_list<const void*> pointers) {
  const DType t = (*operands.begin())->dtype();
  for (const Tensor* x : operands)
    if (x->dtype() != t) return false;
  return attention_uses_flash(t, s.b, s.h, s.kv, s.t, s.d, documents) && flash_attention_supported(s) &&
         flash_attention_aligned(pointers);
}

void flash_forward(const FlashDims& s, const Tensor& qkv, const Tensor* documents, const Tensor& y, const Tensor& lse) {
  device::CudaDevice& dev = cuda_device(y);
  TANDEM_CUDA_CHECK(flash_attention_forward(s, qkv.raw(), y.raw(), lse.f32(), documents ? documents->i32() : nullptr,
                                            qkv.dtype() == DType::F16, dev.compute_stream()));
}

void flash_backward(const FlashDims& s, const Tensor& qkv, const Tensor* documents, const Tensor& y, const Tensor& lse,
                    const Tensor& dy, const Tensor& dqkv) {
  device::CudaDevice& dev = cuda_device(dqkv);
  Tensor dsum = Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "attention_gqa_backward rowsum(dO * O)");
  TANDEM_CHECK(static_cast<int64_t>(dsum.nbytes()) == attention_gqa_backward_scratch_bytes(s.b, s.h, s.t) &&
                   static_cast<int64_t>(dsum.nbytes()) == flash_attention_backward_scratch_bytes(s),
               "attention_gqa_backward: flash scratch size differs from the planner's (scratch_sizes.h)");
  TANDEM_CUDA_CHECK(flash_attention_backward(s, qkv.raw(), y.raw(), lse.f32(), dy.raw(), dqkv.raw(), dsum.f32(),
                                             documents ? documents->i32() : nullptr, qkv.dtype() == DType::F16,
                                             dev.compute_stream()));
  // dsum goes back to the arena now; its next user is queued after these kernels on the compute stream.
}

}  // namespace

void attention_gqa_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse) {
  const FlashDims fs = flash_dims(qkv, heads, kv_heads);
  if (flash_runs(fs, false, {&qkv, &y}, {qkv.raw(), y.raw(), lse.raw()}))
    return flash_forward(fs, qkv, nullptr, y, lse);
#if TANDEM_HAVE_CUDNN_FRONTEND
  const GqaShape s = shape_of(qkv, heads, kv_heads);
  if (s.b > 0 && s.t > 0 && s.d > 0 && y.dtype() == qkv.dtype() && lse.dtype() == DType::F32 &&
      cudnn_can_take(qkv.dtype(), {qkv.raw(), y.raw(), lse.raw(), offset(qkv, k_offset(s)), offset(qkv, v_offset(s))},
                     s)) {
    device::CudaDevice& dev = cuda_device(y);
    GqaAttentionContext& ctx = dev.context<GqaAttentionContext>();
    std::lock_guard<std::mutex> lock(ctx.mu);
    const CachedGraph& entry = graph_for(ctx, false, s, qkv.dtype());
    if (entry.graph) {
      std::unordered_map<int64_t, void*> pack{{kQ, qkv.raw()},
                                              {kK, offset(qkv, k_offset(s))},
                                              {kV, offset(qkv, v_offset(s))},
                                              {kO, y.raw()},
                                              {kStats, lse.raw()}};
      run(ctx, entry, dev, pack);
      return;
    }
  }
#endif
  attention_gqa_forward_plain(qkv, heads, kv_heads, y, lse);
}

void attention_gqa_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                            const Tensor& dy, const Tensor& dqkv) {
  const FlashDims fs = flash_dims(qkv, heads, kv_heads);
  if (flash_runs(fs, false, {&qkv, &y, &dy, &dqkv}, {qkv.raw(), y.raw(), lse.raw(), dy.raw(), dqkv.raw()}))
    return flash_backward(fs, qkv, nullptr, y, lse, dy, dqkv);
#if TANDEM_HAVE_CUDNN_FRONTEND
  const GqaShape s = shape_of(qkv, heads, kv_heads);
  const bool same = y.dtype() == qkv.dtype() && dy.dtype() == qkv.dtype() && dqkv.dtype() == qkv.dtype();
  if (s.b > 0 && s.t > 0 && s.d > 0 && same && lse.dtype() == DType::F32 &&
      cudnn_can_take(qkv.dtype(),
                     {qkv.raw(), y.raw(), lse.raw(), dy.raw(), dqkv.raw(), offset(qkv, k_offset(s)),
                      offset(qkv, v_offset(s)), offset(dqkv, k_offset(s)), offset(dqkv, v_offset(s))},
                     s)) {
    device::CudaDevice& dev = cuda_device(dqkv);
    GqaAttentionContext& ctx = dev.context<GqaAttentionContext>();
    std::lock_guard<std::mutex> lock(ctx.mu);
    const CudnnAttentionBlocks blocks =
        ctx.deterministic ? cudnn_attention_blocking(s.b, s.h, s.kv, s.t, s.d) : CudnnAttentionBlocks{s.t, 1};
    if (blocks.rows > 0 && blocks.rows < s.t) {
      if (backward_in_blocks(ctx, dev, s, blocks, qkv, y, lse, dy, dqkv)) return;
      TANDEM_CHECK(flash_attention_supported(fs),
                   "attention_gqa_backward: cuDNN cannot run the deterministic backward in blocks for ",
                   shape_text(s, qkv.dtype()), ", and the flash kernels cannot take it");
      return flash_backward(fs, qkv, nullptr, y, lse, dy, dqkv);
    }
    const CachedGraph& entry = graph_for(ctx, true, s, qkv.dtype());
    if (entry.graph) {
      std::unordered_map<int64_t, void*> pack{{kQ, qkv.raw()},
                                              {kK, offset(qkv, k_offset(s))},
                                              {kV, offset(qkv, v_offset(s))},
                                              {kO, y.raw()},
                                              {kDO, dy.raw()},
                                              {kStats, lse.raw()},
                                              {kDQ, dqkv.raw()},
                                              {kDK, offset(dqkv, k_offset(s))},
                                              {kDV, offset(dqkv, v_offset(s))}};
      run(ctx, entry, dev, pack);
      return;
    }
  }
#endif
  attention_gqa_backward_plain(qkv, heads, kv_heads, y, lse, dy, dqkv);
}

// Attention kept inside documents (data.document_mask): the flash kernels alone (cuDNN has no graph for it here);
// shapes they cannot take (f32, D other than 64 or 128) are refused.
void attention_gqa_documents_forward(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                                     const Tensor& y, const Tensor& lse) {
  const FlashDims fs = flash_dims(qkv, heads, kv_heads);
  TANDEM_CHECK(flash_runs(fs, true, {&qkv, &y}, {qkv.raw(), y.raw(), lse.raw(), documents.raw()}),
               "attention_gqa_documents_forward: the CUDA backend keeps attention inside documents for bf16 or f16 "
               "data with head dim 64 or 128 only (here ",
               dtype_name(qkv.dtype()), ", D = ", fs.d, "); run it on the CPU backend, or without documents");
  flash_forward(fs, qkv, &documents, y, lse);
}

void attention_gqa_documents_backward(const Tensor& qkv, int heads, int kv_heads, const Tensor& documents,
                                      const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dqkv) {
  const FlashDims fs = flash_dims(qkv, heads, kv_heads);
  TANDEM_CHECK(
      flash_runs(fs, true, {&qkv, &y, &dy, &dqkv},
                 {qkv.raw(), y.raw(), lse.raw(), dy.raw(), dqkv.raw(), documents.raw()}),
      "attention_gqa_documents_backward: the CUDA backend keeps attention inside documents for bf16 or f16 data "
      "with head dim 64 or 128 only (here ",
      dtype_name(qkv.dtype()), ", D = ", fs.d, "); run it on the CPU backend, or without documents");
  flash_backward(fs, qkv, &documents, y, lse, dy, dqkv);
}

bool attention_gqa_backward_in_blocks(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                                      const Tensor& dy, const Tensor& dqkv, int64_t rows, int64_t groups, bool split) {
#if TANDEM_HAVE_CUDNN_FRONTEND
  const GqaShape s = shape_of(qkv, heads, kv_heads);
  if (rows <= 0 || groups <= 0 || s.h % groups != 0 || s.kv % groups != 0 ||
      !cudnn_can_take(qkv.dtype(), {qkv.raw(), y.raw(), dy.raw(), dqkv.raw()}, s))
    return false;
  device::CudaDevice& dev = cuda_device(dqkv);
  GqaAttentionContext& ctx = dev.context<GqaAttentionContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  return backward_in_blocks(ctx, dev, s, CudnnAttentionBlocks{rows, groups, split}, qkv, y, lse, dy, dqkv);
#else
  (void)qkv, (void)heads, (void)kv_heads, (void)y, (void)lse, (void)dy, (void)dqkv, (void)rows, (void)groups,
      (void)split;
  return false;
#endif
}

int64_t attention_gqa_cudnn_workspace_bytes(Device* device, const Tensor& qkv, int heads, int kv_heads, bool backward) {
#if TANDEM_HAVE_CUDNN_FRONTEND
  auto* dev = dynamic_cast<device::CudaDevice*>(device);
  const GqaShape s = shape_of(qkv, heads, kv_heads);
  // The pointers of a planned run are not known; the engine's buffers are 16-byte aligned, as cuDNN wants.
  if (!dev || s.b == 0 || s.t == 0 || s.d == 0 || !cudnn_can_take(qkv.dtype(), {}, s) ||
      attention_uses_flash(qkv.dtype(), s.b, s.h, s.kv, s.t, s.d, false))
    return 0;
  GqaAttentionContext& ctx = dev->context<GqaAttentionContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  const CudnnAttentionBlocks blocks =
      backward && ctx.deterministic ? cudnn_attention_blocking(s.b, s.h, s.kv, s.t, s.d) : CudnnAttentionBlocks{s.t, 1};
  if (blocks.rows > 0 && blocks.rows < s.t) {
    const BlockGraphs g = block_graphs(ctx, s, qkv.dtype(), blocks);
    return g.widest < 0 ? 0 : cudnn_attention_blocked_scratch(g.widest, blocks.rows, s.b, s.h, s.kv, s.t, s.d, g.split);
  }
  const CachedGraph& entry = graph_for(ctx, backward, s, qkv.dtype());
  return entry.graph ? (entry.workspace + 3) / 4 * 4 : 0;
#else
  (void)device, (void)qkv, (void)heads, (void)kv_heads, (void)backward;
  return 0;
#endif
}

}  // namespace tandem::ops::cuda
