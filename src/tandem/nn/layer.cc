#include "tandem/nn/layer.h"

namespace tandem::nn {

std::vector<Parameter*> Layer::parameters() {
  std::vector<Parameter*> out;
  for (auto& p : params_) out.push_back(p.get());
  for (Layer* c : children_)
    for (Parameter* p : c->parameters()) out.push_back(p);
  return out;
}

void Layer::freeze() {
  for (auto& p : params_) p->trainable = false;
  for (Layer* c : children_) c->freeze();
}

bool kept_attention(const Saved& saved, Tensor& att, Tensor& lse) {
  if (saved.kept.empty()) return false;
  TANDEM_CHECK(saved.kept.size() == 2, "a block's kept attention is its output and log-sum-exp, not ",
               saved.kept.size(), " tensors");
  att = saved.kept[0];
  lse = saved.kept[1];
  return true;
}

void keep_attention(const Batch& batch, const Tensor& att, const Tensor& lse, Saved& saved) {
  if (batch.keep_attention) saved.kept = {att, lse};
}

Tensor gradient_or_sink(const Parameter& p, Device& device) {
  if (p.trainable) return p.grad;
  return Tensor::zeros(p.shape, DType::F32, device, p.name + " gradient (frozen: dropped)");
}

Parameter& Layer::add_parameter(const std::string& local, Shape shape, Init init, bool decay) {
  Shard whole;
  whole.split = shape_numel(shape);
  return add_sharded_parameter(local, shape, shape, whole, init, decay);
}

Parameter& Layer::add_sharded_parameter(const std::string& local, Shape global_shape, Shape local_shape, Shard shard,
                                        Init init, bool decay) {
  TANDEM_CHECK(
      shard.valid(shape_numel(global_shape)) && shape_numel(local_shape) * shard.parts == shape_numel(global_shape),
      "inconsistent shard of ", local, " ", shape_str(global_shape), " -> ", shape_str(local_shape));
  auto p = std::make_unique<Parameter>();
  p->name = child_name(local);
  p->shape = std::move(local_shape);
  p->global_shape = std::move(global_shape);
  p->shard = shard;
  p->init = init;
  p->decay = decay;
  params_.push_back(std::move(p));
  return *params_.back();
}

Parameter& Layer::add_replica_parameter(const std::string& logical_name, Shape global_shape, Shape local_shape,
                                        Shard shard, bool decay) {
  Parameter& p = add_sharded_parameter("", std::move(global_shape), std::move(local_shape), shard, Init::Normal, decay);
  p.name = logical_name;
  p.replica = true;
  return p;
}

void Layer::place_experts(const ExpertSlot& slot) {
  keep_experts(slot);
  for (Layer* child : children_) child->place_experts(slot);
}

}  // namespace tandem::nn
