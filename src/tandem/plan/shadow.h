// Shadow execution: the planner's replay of what the engine allocates and frees, in the order the code does it,
// without computing anything. A Sym is a tensor without data: a shape and a reference-counted storage that
// reports its bytes to a Tracker when created and when its last holder goes, so ordinary C++ scoping replays the
// lifetimes of the real Tensors line by line. Each function below mirrors one function of nn/, ops/ or
// parallel/ and names it; when that code changes what it allocates, the function here must follow (the planner
// tests compare the replay with the allocator's measured peak).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/plan/breakdown.h"
#include "tandem/plan/model_info.h"

namespace tandem::plan {

// Which op implementations' scratch the replay assumes (ops/cpu or ops/cuda).
enum class Backend { Cpu, Cuda };

namespace shadow {

// Live bytes by term, and what was live at the highest point.
class Tracker {
 public:
  void allocate(int64_t bytes, Term term);
  void release(int64_t bytes, Term term);

  const Breakdown& live() const { return live_; }
  const Breakdown& at_peak() const { return at_peak_; }
  int64_t peak() const { return peak_; }
  const std::string& peak_where() const { return peak_where_; }
  void reset_peak();  // peak := live
  // Labels the allocations that follow ("blocks.3 backward"), so a peak can say where it happened.
  void set_where(std::string where) { where_ = std::move(where); }
  int64_t allocated_total() const { return allocated_total_; }  // bytes ever allocated
  int64_t allocations() const { return allocations_; }          // how many: about one per op
  int64_t max_live(Term t) const { return max_live_[t]; }       // the most one term ever held

  // While set, activations are labelled Transient: a recomputed layer's activations live for its backward only.
  bool recomputing = false;

 private:
  Breakdown live_, at_peak_, max_live_;
  int64_t live_total_ = 0, peak_ = 0, allocated_total_ = 0, allocations_ = 0;
  std::string where_, peak_where_;
};

// A tensor without data (see the file comment). Views share the storage, as Tensor views do.
class Sym {
 public:
  Sym() = default;
  Sym(Tracker& tracker, Shape shape, int elem_bytes, Term term);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_numel(shape_); }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i < 0 ? static_cast<int>(shape_.size()) + i : i)); }
  int64_t bytes() const { return storage_ ? storage_->bytes : 0; }
  Term term() const { return storage_ ? storage_->term : Term::Other; }
  Sym view(Shape shape) const;

 private:
  struct Storage {
    Storage(Tracker* t, int64_t b, Term k) : tracker(t), bytes(b), term(k) {}
    Storage(const Storage&) = delete;  // one release per allocation
    Storage& operator=(const Storage&) = delete;
    ~Storage() { tracker->release(bytes, term); }
    Tracker* tracker;
    int64_t bytes;
    Term term;
  };
  std::shared_ptr<Storage> storage_;
  Shape shape_;
};

// nn::Saved without data.
struct SymSaved {
  std::vector<Sym> tensors;
  std::vector<SymSaved> children;
  void clear() {
    tensors.clear();
    children.clear();
  }
};

// What every replayed op needs to know about the run.
struct Context {
  Tracker* tracker = nullptr;
  int act_bytes = 4;  // the compute dtype X of activations and the weights layers read
  Backend backend = Backend::Cpu;
  int cpu_threads = 1;  // OpenMP threads of one process: the CPU attention keeps scratch per thread

  Sym act(Shape shape, Term term) const { return Sym(*tracker, std::move(shape), act_bytes, term); }
  Sym f32(Shape shape, Term term) const { return Sym(*tracker, std::move(shape), 4, term); }
  // An allocation freed before the op returns.
  void scratch(int64_t bytes) const;
};

// ZeRO's hooks (parallel::ParameterStore::{before,after}_{forward,backward}) for the layers of one rank.
class ZeroShadow {
 public:
  // `shard[layer]`: ceil(P_u / dp) elements; `gathered_bytes`: element size of the gathered values.
  ZeroShadow(const Context& ctx, int stage, int dp, std::vector<int64_t> shard, int gathered_bytes);
  void before_forward(size_t layer);
  void after_forward(size_t layer);
  void before_backward(size_t layer);
  void after_backward(size_t layer);

 private:
  void gather(size_t layer);
  Context ctx_;
  int stage_, dp_, gathered_bytes_;
  std::vector<int64_t> shard_;
  std::vector<Sym> values_, grads_;
};

// nn::Layer::forward / backward of one layer of `info`. `out_term` labels the output (Activations, or Transient
// for the logits).
Sym layer_forward(const Context& ctx, const LayerInfo& layer, const Sym& x, SymSaved& saved, Term out_term);
Sym layer_backward(const Context& ctx, const LayerInfo& layer, const Sym& dy, SymSaved& saved);

// nn::Model::forward_range / backward_range over layers [first, last) with ZeRO's hooks.
Sym forward_range(const Context& ctx, const ModelInfo& model, size_t first, size_t last, const Sym& input,
                  std::vector<SymSaved>& saved, bool recompute, ZeroShadow& hooks);
Sym backward_range(const Context& ctx, const ModelInfo& model, size_t first, size_t last, const Sym& doutput,
                   std::vector<SymSaved>& saved, bool recompute, ZeroShadow& hooks);

// nn::cross_entropy_sum_and_grad on logits (..., V_local): three (N) f32 statistics, freed on return.
void loss(const Context& ctx, const Sym& logits);

// The per-thread scratch of ops/cpu/attention.cc: how many threads' worth it allocates (its plan_of).
int cpu_attention_teams(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int threads);

}  // namespace shadow
}  // namespace tandem::plan
