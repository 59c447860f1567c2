#include "tandem/parallel/zero/unit_builder.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

namespace tandem::parallel {

bool ratio_offloads(int64_t seen_through_unit, int64_t held, double ratio) {
  return static_cast<double>(seen_through_unit) > (1.0 - ratio) * static_cast<double>(held);
}

double ratio_keeping_first(const std::vector<int64_t>& layer_params, size_t kept) {
  if (kept >= layer_params.size()) return 1;
  int64_t total = 0, first = 0;
  for (size_t i = 0; i < layer_params.size(); ++i) (i < kept ? first : total) += layer_params[i];
  total += first;
  const int64_t through_next = first + layer_params[kept];
  const auto keeps = [&](double r) {
    return r > 0 && r <= 1 && !ratio_offloads(first, total, r) && ratio_offloads(through_next, total, r);
  };
  // Half way into the next layer, then its four-digit floor where the rule still keeps the same layers.
  const double exact =
      1.0 - (static_cast<double>(first) + 0.5 * static_cast<double>(layer_params[kept])) / static_cast<double>(total);
  const double rounded = std::floor(exact * 1e4) / 1e4;
  return keeps(rounded) ? rounded : keeps(exact) ? exact : 1;
}

Units UnitBuilder::build(const std::vector<size_t>& layers) {
  units_.of_layer.assign(s_.model.layers().size(), {});
  // Tied names, and whether this rank holds both uses of each.
  std::map<std::string, int> uses_held;
  for (const nn::Parameter* r : s_.model.replicas()) uses_held[r->name] = 0;
  for (size_t layer : layers)
    for (const nn::Parameter* p : s_.model.layers()[layer]->parameters())
      if (uses_held.count(p->name)) ++uses_held[p->name];
  std::map<std::string, int> tied_unit;  // by name: the unit of a tied parameter built on this rank
  // offload_optimizer.ratio: the last layers' units are offloaded (ratio_offloads).
  int64_t held_parameters = 0, seen_parameters = 0;
  for (size_t layer : layers)
    for (const nn::Parameter* p : s_.model.layers()[layer]->parameters()) held_parameters += shape_numel(p->shape);
  const auto offload_next = [&](const std::vector<nn::Parameter*>& params, bool tied_remote) {
    for (const nn::Parameter* p : params) seen_parameters += shape_numel(p->shape);
    return s_.offload.optimizer.enabled() && !tied_remote &&
           ratio_offloads(seen_parameters, held_parameters, s_.offload.optimizer.ratio);
  };
  for (size_t layer : layers) {
    const std::string& name = s_.model.layers()[layer]->name();
    const std::string label = "layer " + std::to_string(layer) + (name.empty() ? "" : " (" + name + ")");
    // An expert slot's experts are units of their own, sharded over the ranks that hold the same experts.
    std::vector<nn::Parameter*> plain, frozen, experts, frozen_experts;
    for (nn::Parameter* p : s_.model.layers()[layer]->parameters()) {
      if (!uses_held.count(p->name)) {
        TANDEM_CHECK(!p->expert || s_.experts, "'", p->name, "' holds an expert slot's experts but the store has no ",
                     "group of that slot's replicas");
        (p->expert ? (p->trainable ? experts : frozen_experts) : (p->trainable ? plain : frozen)).push_back(p);
        continue;
      }
      // A tied parameter is a unit of its own, so the copies on two stages shard alike; one unit when this rank
      // holds both uses.
      const auto it = tied_unit.find(p->name);
      if (it != tied_unit.end()) {
        Unit& u = *units_.all[static_cast<size_t>(it->second)];
        u.aliases.push_back(p);
        p->value = u.params[0]->value;
        p->grad = u.params[0]->grad;
        units_.of_layer[layer].push_back(it->second);
        continue;
      }
      const bool tied_remote = uses_held.at(p->name) == 1;
      TANDEM_CHECK(!tied_remote || s_.has_tied_group, "'", p->name,
                   "' is tied across pipeline stages but the engine gave the store no tied group");
      tied_unit[p->name] =
          add(layer, {p}, label + " '" + p->name + "'", offload_next({p}, tied_remote), uses_held.at(p->name), s_.zero);
      units_.all.back()->tied_remote = tied_remote;
    }
    if (!plain.empty()) add(layer, plain, label, offload_next(plain, false), 1, s_.zero);
    if (!experts.empty()) add(layer, experts, label + " experts", offload_next(experts, false), 1, *s_.experts);
    if (!frozen.empty()) {
      for (const nn::Parameter* p : frozen) seen_parameters += shape_numel(p->shape);
      add(layer, frozen, label + " frozen", /*offload=*/false, 1, s_.zero);
    }
    if (!frozen_experts.empty()) {
      for (const nn::Parameter* p : frozen_experts) seen_parameters += shape_numel(p->shape);
      add(layer, frozen_experts, label + " frozen experts", /*offload=*/false, 1, *s_.experts);
    }
  }
  return std::move(units_);
}

int UnitBuilder::add(size_t layer, std::vector<nn::Parameter*> params, std::string label, bool offload, int uses,
                     ZeroSharding& zero) {
  const DType compute = s_.compute;
  Device& device = s_.device;
  const bool param_offload = s_.offload.param.enabled();
  const bool swap_state = s_.offload.optimizer.device == spec::OffloadDevice::Nvme;
  const bool swap_values = s_.offload.param.device == spec::OffloadDevice::Nvme;
  auto u = std::make_unique<Unit>();
  u->zero = &zero;
  u->params = std::move(params);
  u->uses = uses;
  u->label = std::move(label);
  u->state = !offload ? Where::Device : swap_state ? Where::SwapFile : Where::Host;
  // The memory the optimizer's state of this unit is made in: host memory when offloaded (unless swapped: made in the
  // swap file).
  Device& state = offload ? *s_.host : device;
  std::optional<PurposeScope> host_scope;
  if (s_.host) host_scope.emplace(*s_.host, MemoryPurpose::Parameters);
  for (nn::Parameter* p : u->params) {
    u->offsets.push_back(u->numel);
    u->numel += shape_numel(p->shape);
  }
  u->shard = zero.shard_of(u->numel);
  const int64_t s0 = zero.owned_begin(*u), s1 = s0 + u->shard;
  u->frozen = !u->params.front()->trainable;
  for (const nn::Parameter* p : u->params)
    TANDEM_CHECK(p->trainable != u->frozen, u->label, ": trainable and frozen parameters in one unit");
  if (u->frozen) {
    add_frozen_values(*u);
    return index_of_new(layer, std::move(u));
  }

  // The fp32 master, initialised from the seed by logical element: the whole buffer at stage 0, the owned
  // shard otherwise (with one replica the two are the same).
  const int64_t m0 = zero.master_begin(*u), mn = zero.master_count(*u);
  const bool alias = compute == DType::F32 && !zero.values_transient() && !offload;
  PurposeScope as_parameters(device, MemoryPurpose::Parameters);
  if (!zero.values_transient()) {
    u->full_values = Tensor::zeros({zero.padded(*u)}, compute, device, u->label + " parameters");
    u->point_values(u->full_values);
  }
  if (u->state == Where::SwapFile) {
    // Its master and moments go to the swap file (draw_swapped draws the master there).
    s_.swap.place_state(*u, mn);
  } else {
    u->master = alias ? u->full_values.flat_slice(m0, mn, {mn})
                      : Tensor::zeros({mn}, DType::F32, state, u->label + " fp32 master parameters");
  }
  for (size_t i = 0; i < u->params.size() && u->state != Where::SwapFile; ++i) {
    const int64_t a = std::max(u->offsets[i], m0),
                  b = std::min(u->offsets[i] + shape_numel(u->params[i]->shape), m0 + mn);
    if (a < b) draw_initial(*u->params[i], u->master.flat_slice(a - m0, b - a, {b - a}), a - u->offsets[i]);
  }
  if (offload) {
    // The owned compute-dtype values: with offload_param on the host or in its swap file, the device's only copy
    // made before each gather; otherwise on the device, with a copy on the host only when that is free (the fp32
    // master itself, in host memory).
    const bool master_is_values = compute == DType::F32 && u->state == Where::Host;
    u->owned_values = param_offload ? (swap_values ? Where::SwapFile : Where::Host)
                                    : (master_is_values ? Where::Host : Where::Device);
    if (u->owned_values == Where::SwapFile) {
      s_.swap.place_values(*u, mn);
    } else if (!u->staged()) {
      u->owned_values_host = compute == DType::F32
                                 ? u->master
                                 : Tensor::zeros({mn}, compute, *s_.host, u->label + " parameters on the host");
    }
    if (zero.values_transient() && !param_offload)
      u->owned_values_device = Tensor::zeros({mn}, compute, device, u->label + " parameter shard");
  }
  if (zero.values_transient()) zero.release(*u);
  PurposeScope as_gradients(device, MemoryPurpose::Gradients);
  if (s_.host) host_scope.emplace(*s_.host, MemoryPurpose::Gradients);
  if (!zero.grads_transient() && !offload) {
    u->full_grads = Tensor::zeros({zero.padded(*u)}, DType::F32, device, u->label + " gradients");
    u->point_grads(u->full_grads);
  }
  if (offload && !zero.grads_transient() && s_.offload.micro_batches * u->uses > 1) {
    // The step's running sum; the last micro-batch's reduced sum lands in its owned slice, which the host AdamW
    // reads before the next step's first copy down overwrites it: one fp32 gradient on the host, not two.
    u->full_grads_host = Tensor::zeros({zero.padded(*u)}, DType::F32, *s_.host, u->label + " gradients on the host");
    u->owned_grads = u->full_grads_host.flat_slice(m0, mn, {mn});
  } else if (zero.stage() >= 1 || offload) {
    u->owned_grads = Tensor::zeros({mn}, DType::F32, state, u->label + " gradient shard");
  }

  u->first_segment = units_.segments.size();
  for (size_t i = 0; i < u->params.size(); ++i) {
    nn::Parameter* p = u->params[i];
    const int64_t off = u->offsets[i], n = shape_numel(p->shape);
    if (zero.stage() == 0 && !offload) {
      units_.segments.push_back(
          {p->name, u->master.flat_slice(off, n, {n}), u->full_grads.flat_slice(off, n, {n}), p->decay, 0});
      units_.segment_param.push_back(p);
      units_.segment_start.push_back(off);
    } else {
      const int64_t a = std::max(off, s0), b = std::min(off + n, s1);
      if (a < b) {
        // A swapped unit's segments hold no value: the master is paged in from the swap file for each use.
        units_.segments.push_back(
            {p->name, u->state == Where::SwapFile ? Tensor() : u->master.flat_slice(a - s0, b - a, {b - a}),
             u->owned_grads.flat_slice(a - s0, b - a, {b - a}), p->decay, a - off});
        units_.segment_param.push_back(p);
        units_.segment_start.push_back(a - s0);
      }
    }
  }
  u->end_segment = units_.segments.size();
  return index_of_new(layer, std::move(u));
}

int UnitBuilder::index_of_new(size_t layer, std::unique_ptr<Unit> u) {
  const int index = static_cast<int>(units_.all.size());
  units_.of_layer[layer].push_back(index);
  units_.all.push_back(std::move(u));
  return index;
}

}  // namespace tandem::parallel
