#include "tandem/nn/model.h"

#include <algorithm>
#include <vector>

#include "tandem/core/philox.h"
#include "tandem/core/random_fill.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {

Layer& Model::add(std::unique_ptr<Layer> layer) {
  TANDEM_CHECK(!materialized(), "add layers before materialize()");
  for (Parameter* p : layer->parameters()) {
    const auto it = originals_.find(p->name);
    if (p->replica) {
      // A replica follows its original, and holds what the original holds.
      if (it == originals_.end())
        TANDEM_FAIL("'", p->name,
                    "' is tied to a parameter no earlier layer declares: add the layer that owns it first");
      const Parameter& o = *it->second;
      const bool whole = o.shard.parts == 1 && p->shard.parts == 1;  // one shard, however it is spelt
      TANDEM_CHECK(o.global_shape == p->global_shape && o.shape == p->shape && o.shard.part == p->shard.part &&
                       o.shard.parts == p->shard.parts &&
                       (whole || (o.shard.outer == p->shard.outer && o.shard.split == p->shard.split &&
                                  o.shard.inner == p->shard.inner && o.shard.blocks == p->shard.blocks)),
                   "replica of '", p->name, "' is ", shape_str(p->shape), " of ", shape_str(p->global_shape),
                   ", its original ", shape_str(o.shape), " of ", shape_str(o.global_shape));
      continue;
    }
    if (it != originals_.end()) TANDEM_FAIL("two parameters are both named '", p->name, "': rename a layer");
    originals_.emplace(p->name, p);
  }
  layers_.push_back(std::move(layer));
  return *layers_.back();
}

std::vector<Parameter*> Model::parameters() const {
  std::vector<Parameter*> out;
  for (const auto& l : layers_)
    for (Parameter* p : l->parameters())
      if (!p->replica) out.push_back(p);
  return out;
}

std::vector<Parameter*> Model::replicas() const {
  std::vector<Parameter*> out;
  for (const auto& l : layers_)
    for (Parameter* p : l->parameters())
      if (p->replica) out.push_back(p);
  return out;
}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (Parameter* p : parameters()) n += shape_numel(p->shape);
  return n;
}

ShardIndex Shard::index() const {
  TANDEM_CHECK(blocks.size() <= static_cast<size_t>(ShardIndex::kMaxBlocks), "a shard of ", blocks.size(),
               " fused blocks; kernels index at most ", ShardIndex::kMaxBlocks);
  ShardIndex s;
  s.outer = outer;
  s.split = split;
  s.inner = inner;
  s.part = part;
  s.parts = parts;
  s.nblocks = static_cast<int>(blocks.size());
  for (size_t k = 0; k < blocks.size(); ++k) s.blocks[k] = blocks[k];
  return s;
}

namespace {
// The draws of a Normal or Uniform parameter's elements from `first` on. Keyed by the element's index in the logical
// tensor, so a shard draws what the whole would hold there.
RandomFill random_fill_of(const Parameter& param, uint64_t seed, int64_t first) {
  RandomFill f;
  f.kind = param.init == Init::Normal ? RandomKind::Normal : RandomKind::Uniform;
  f.scale = param.init == Init::Normal ? param.stddev : param.bound;
  f.seed = seed;
  f.stream = hash_name(param.name);
  f.first = first;
  f.shard = param.shard.index();
  return f;
}
}  // namespace

std::vector<float> initial_values(const Parameter& param, uint64_t seed, int64_t first, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  switch (param.init) {
    case Init::Zeros:
      break;
    case Init::Ones:
      std::fill(v.begin(), v.end(), 1.0f);
      break;
    case Init::Normal:
    case Init::Uniform:
      random_fill_host(v.data(), count, random_fill_of(param, seed, first));
      break;
  }
  return v;
}

void initialize_parameter(const Parameter& param, const Tensor& value, uint64_t seed, int64_t first) {
  TANDEM_CHECK(value.dtype() == DType::F32, "initial values are drawn in fp32, got ", dtype_name(value.dtype()));
  // Drawn where `value` lives: the host and a GPU draw the same bits (core/random_fill.h); a counting device counts the
  // ops and draws nothing.
  switch (param.init) {
    case Init::Zeros:
      value.fill_zero();
      break;
    case Init::Ones:
      ops::fill(value, 1.0f);
      break;
    case Init::Normal:
    case Init::Uniform:
      ops::random_fill(value, random_fill_of(param, seed, first));
      break;
  }
}

void Model::materialize(Device& device, uint64_t seed) {
  TANDEM_CHECK(!materialized(), "materialize() called twice");
  const int64_t total = num_parameters();
  values_ = Tensor::empty({total}, DType::F32, device, "parameters (fp32)");
  grads_ = Tensor::zeros({total}, DType::F32, device, "gradients (fp32)");
  int64_t offset = 0;
  for (Parameter* p : parameters()) {
    const int64_t n = shape_numel(p->shape);
    p->value = values_.flat_slice(offset, n, p->shape);
    if (p->trainable) p->grad = grads_.flat_slice(offset, n, p->shape);
    initialize_parameter(*p, p->value, seed);
    offset += n;
  }
  // A tied replica is its original's buffer: one value, one gradient both uses add into.
  for (Parameter* r : replicas()) {
    const Parameter& o = *originals_.at(r->name);
    r->value = o.value;
    r->grad = o.grad;
  }
}

Tensor Model::forward(const Tensor& input, std::vector<Saved>& saved, bool recompute) {
  TANDEM_CHECK(materialized(), "materialize() the model before forward()");
  return forward_range(0, layers_.size(), input, saved, recompute);
}

void Model::backward(const Tensor& doutput, std::vector<Saved>& saved, bool recompute) {
  backward_range(0, layers_.size(), doutput, saved, recompute);
}

Tensor Model::forward_range(size_t first, size_t last, const Tensor& input, std::vector<Saved>& saved, bool recompute,
                            LayerHooks* hooks, const Batch& batch, HostCheckpoints* host) {
  TANDEM_CHECK(first <= last && last <= layers_.size(), "layer range [", first, ", ", last, ")");
  saved.assign(last - first, Saved{});
  Tensor x = input;
  for (size_t i = first; i < last; ++i) {
    const bool to_host = recompute && host && host->holds(i - first, last - first);
    Saved kept;
    if (to_host) kept = host->copy_up(x, layers_[i]->name());  // beside the layer's forward, which reads x too
    if (hooks) hooks->before_forward(i);
    Tensor y = layers_[i]->forward(x, batch, saved[i - first]);
    if (recompute) {
      // The layer's input, and what its forward keeps for the second beside it (Saved::kept).
      std::vector<Tensor> reused = std::move(saved[i - first].kept);
      saved[i - first] = to_host ? std::move(kept) : Saved{{x}, {}, {}};
      saved[i - first].kept = std::move(reused);
    }
    if (to_host) host->release_after_copy();  // x may go as it is replaced below
    if (hooks) hooks->after_forward(i);
    x = y;
  }
  return x;
}

Tensor Model::backward_range(size_t first, size_t last, const Tensor& doutput, std::vector<Saved>& saved,
                             bool recompute, LayerHooks* hooks, const Batch& batch, HostCheckpoints* host) {
  TANDEM_CHECK(saved.size() == last - first, "backward() without a matching forward()");
  Tensor dy = doutput;
  for (size_t i = last; i-- > first;) {
    Saved& s = saved[i - first];
    if (hooks) hooks->before_backward(i);
    if (recompute) {
      const bool from_host = host && host->holds(i - first, last - first);
      const Tensor x = from_host ? host->take(s, layers_[i]->name()) : s.tensors.at(0);
      // The next layer's input starts down now, beside this layer's recompute and backward.
      if (host && i > first && host->holds(i - 1 - first, last - first))
        host->prefetch(saved[i - 1 - first], layers_[i - 1]->name());
      std::vector<Tensor> reused = std::move(s.kept);
      s.clear();
      s.kept = std::move(reused);
      layers_[i]->forward_for_backward(x, batch, s);
      s.kept.clear();
    }
    dy = layers_[i]->backward(dy, batch, s);
    s.clear();
    if (hooks) hooks->after_backward(i);
  }
  return dy;
}

}  // namespace tandem::nn
