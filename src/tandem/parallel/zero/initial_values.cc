// Initial values of the ParameterStore's units: each unit's drawn from the seed (UnitBuilder, unit_builder.h) on the
// device that runs the step, whatever holds them (a GPU draws the host's bits, core/random_fill.h): the fp32 master
// where it is, a frozen unit's compute-dtype values through fp32 chunks rounded there, offloaded state in chunks copied
// down to host memory, a swapped unit's master into the swap buffer and on to its region of the swap file. A frozen
// base read from files comes in through the store's write_frozen, rounded on the host.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "tandem/ops/ops.h"
#include "tandem/parallel/zero/parameter_store.h"
#include "tandem/parallel/zero/unit_builder.h"

namespace tandem::parallel {

void UnitBuilder::add_frozen_values(Unit& u) {
  const ZeroSharding& zero = *u.zero;
  PurposeScope as_parameters(s_.device, MemoryPurpose::Parameters);
  // The whole buffer at stages 0-2, drawn on every rank alike (nothing to gather); the owned shard at stage 3.
  const bool sharded = zero.stage() == 3;
  const int64_t begin = sharded ? zero.owned_begin(u) : 0, count = sharded ? u.shard : zero.padded(u);
  const Tensor held = Tensor::zeros({count}, s_.compute, s_.device, u.label + (sharded ? " shard" : " parameters"));
  if (sharded) {
    u.owned_values_device = held;
  } else {
    u.full_values = held;
    u.point_values(held);
  }
  const int64_t end = begin + count;
  for (size_t i = 0; i < u.params.size(); ++i) {
    const int64_t a = std::max(u.offsets[i], begin), b = std::min(u.offsets[i] + shape_numel(u.params[i]->shape), end);
    if (a < b) draw_initial(*u.params[i], held.flat_slice(a - begin, b - a, {b - a}), a - u.offsets[i]);
  }
}

void UnitBuilder::draw_swapped(const std::vector<std::unique_ptr<Unit>>& units) {
  for (const auto& u : units) {
    if (u->state != Where::SwapFile) continue;
    const int64_t mn = u->owned_grads.numel(), m0 = u->zero->master_begin(*u);
    s_.swap.write_initial(*u, [&](const Tensor& master) {  // (mn) fp32, zeroed
      for (size_t i = 0; i < u->params.size(); ++i) {
        const int64_t a = std::max(u->offsets[i], m0),
                      b = std::min(u->offsets[i] + shape_numel(u->params[i]->shape), m0 + mn);
        if (a < b)
          nn::initialize_parameter(*u->params[i], master.flat_slice(a - m0, b - a, {b - a}), s_.seed,
                                   a - u->offsets[i]);
      }
    });
  }
}

void UnitBuilder::draw_initial(const nn::Parameter& p, const Tensor& dst, int64_t first) {
  Device& device = s_.device;
  const uint64_t seed = s_.seed;
  if (&dst.device() == &device && dst.dtype() == DType::F32) {
    nn::initialize_parameter(p, dst, seed, first);
    return;
  }
  TANDEM_CHECK(&dst.device() == &device || dst.dtype() == DType::F32, p.name,
               ": initial values in host memory are fp32 state, got ", dtype_name(dst.dtype()));
  // In fp32 chunks on the device, then rounded there (ops::cast, to nearest even) or copied to the host. A counting
  // device allocates the chunks as the run does and counts the ops; its copies move nothing.
  PurposeScope scope(device, MemoryPurpose::Transient);
  constexpr int64_t kChunk = int64_t{1} << 24;  // 16M values, 64 MiB of fp32
  for (int64_t at = 0; at < dst.numel(); at += kChunk) {
    const int64_t n = std::min(kChunk, dst.numel() - at);
    const Tensor values = Tensor::empty({n}, DType::F32, device, p.name + " initial values");  // (n) f32
    nn::initialize_parameter(p, values, seed, first + at);
    const Tensor part = dst.flat_slice(at, n, {n});
    if (&dst.device() == &device)
      ops::cast(values, part);
    else
      part.copy_from(values);  // fp32 state in host memory (offload)
  }
}

namespace {

// Writes elements [begin, begin + held.numel()) of frozen unit `u`'s flat buffer, held by `held` (compute dtype), from
// `fill` (as write_frozen's), rounded on the host.
void fill_frozen(const Unit& u, int64_t begin, const Tensor& held,
                 const std::function<void(const nn::Parameter&, int64_t, int64_t, float*)>& fill) {
  const DType compute = held.dtype();
  const int64_t end = begin + held.numel();
  for (size_t i = 0; i < u.params.size(); ++i) {
    const int64_t a = std::max(u.offsets[i], begin), b = std::min(u.offsets[i] + shape_numel(u.params[i]->shape), end);
    if (a >= b) continue;
    std::vector<float> v(static_cast<size_t>(b - a));
    fill(*u.params[i], a - u.offsets[i], b - a, v.data());
    // Rounded on the host as ops::cast rounds (to nearest even): the values draw_initial rounds on the device.
    const Tensor dst = held.flat_slice(a - begin, b - a, {b - a});
    if (compute == DType::F32) {
      dst.copy_from_host(v.data());
      continue;
    }
    std::vector<uint16_t> half(v.size());
    for (size_t k = 0; k < v.size(); ++k) half[k] = compute == DType::BF16 ? f32_to_bf16(v[k]) : f32_to_f16(v[k]);
    dst.copy_from_host(half.data());
  }
}

}  // namespace

void ParameterStore::write_frozen(const std::function<void(const nn::Parameter&, int64_t, int64_t, float*)>& fill) {
  ZeroSharding::Pending pending;
  for (auto& u : units_) {
    if (!u->frozen) continue;
    ZeroSharding& zero = *u->zero;
    const bool sharded = zero.stage() >= 1;
    const int64_t begin = sharded ? zero.owned_begin(*u) : 0, count = sharded ? u->shard : zero.padded(*u);
    const Tensor held = zero.stage() == 3 ? u->owned_values_device : u->full_values.flat_slice(begin, count, {count});
    fill_frozen(*u, begin, held, fill);
    if (zero.stage() == 1 || zero.stage() == 2) zero.regather(*u, &pending);
  }
  for (auto& r : pending) r->wait();
}

}  // namespace tandem::parallel
