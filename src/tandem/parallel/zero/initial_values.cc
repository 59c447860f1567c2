// ParameterStore's initial values (parameter_store.h): each unit's drawn from the seed on the device that runs the
// step, whatever holds them (a GPU draws the host's bits, core/random_fill.h): the fp32 master where it is, a frozen
// unit's compute-dtype values through fp32 chunks rounded there, offloaded state in chunks copied down to host memory.
// A frozen base read from files comes in through write_frozen, rounded on the host. A swapped unit's master is drawn
// into the swap buffer and written to its region of the swap file (make_swap).
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "tandem/ops/ops.h"
#include "tandem/parallel/zero/parameter_store.h"

namespace tandem::parallel {

void ParameterStore::add_frozen_values(Unit& u, uint64_t seed) {
  PurposeScope as_parameters(device_, MemoryPurpose::Parameters);
  // The whole buffer at stages 0-2, drawn on every rank alike (nothing to gather); the owned shard at stage 3.
  const int64_t begin = stage_ == 3 ? dp_.rank() * u.shard : 0, count = stage_ == 3 ? u.shard : u.shard * dp_.size();
  const Tensor held = Tensor::zeros({count}, compute_, device_, u.label + (stage_ == 3 ? " shard" : " parameters"));
  if (stage_ == 3) {
    u.owned_values_device = held;
  } else {
    u.full_values = held;
    point_values(u, held);
  }
  const int64_t end = begin + count;
  for (size_t i = 0; i < u.params.size(); ++i) {
    const int64_t a = std::max(u.offsets[i], begin), b = std::min(u.offsets[i] + shape_numel(u.params[i]->shape), end);
    if (a < b) draw_initial(*u.params[i], held.flat_slice(a - begin, b - a, {b - a}), seed, a - u.offsets[i]);
  }
}

void ParameterStore::make_swap(const spec::OffloadConfig& optimizer, const spec::OffloadConfig& param, uint64_t seed) {
  swap_.open(units_, device_.holds_data(), optimizer, param, "dp rank " + std::to_string(dp_.rank()));
  if (!swap_.has_state_file()) return;
  for (const auto& u : units_) {
    if (u->state != Where::SwapFile) continue;
    const int64_t mn = u->owned_grads.numel(), m0 = stage_ == 0 ? 0 : dp_.rank() * u->shard;
    swap_.write_initial(*u, [&](const Tensor& master) {  // (mn) fp32, zeroed
      for (size_t i = 0; i < u->params.size(); ++i) {
        const int64_t a = std::max(u->offsets[i], m0),
                      b = std::min(u->offsets[i] + shape_numel(u->params[i]->shape), m0 + mn);
        if (a < b)
          nn::initialize_parameter(*u->params[i], master.flat_slice(a - m0, b - a, {b - a}), seed, a - u->offsets[i]);
      }
    });
  }
}

void ParameterStore::draw_initial(const nn::Parameter& p, const Tensor& dst, uint64_t seed, int64_t first) {
  if (&dst.device() == &device_ && dst.dtype() == DType::F32) {
    nn::initialize_parameter(p, dst, seed, first);
    return;
  }
  TANDEM_CHECK(&dst.device() == &device_ || dst.dtype() == DType::F32, p.name,
               ": initial values in host memory are fp32 state, got ", dtype_name(dst.dtype()));
  // In fp32 chunks on the device, then rounded there (ops::cast, to nearest even) or copied to the host. A counting
  // device allocates the chunks as the run does and draws nothing.
  PurposeScope scope(device_, MemoryPurpose::Transient);
  constexpr int64_t kChunk = int64_t{1} << 24;  // 16M values, 64 MiB of fp32
  for (int64_t at = 0; at < dst.numel(); at += kChunk) {
    const int64_t n = std::min(kChunk, dst.numel() - at);
    const Tensor values = Tensor::empty({n}, DType::F32, device_, p.name + " initial values");  // (n) f32
    nn::initialize_parameter(p, values, seed, first + at);
    if (!device_.holds_data()) continue;
    const Tensor part = dst.flat_slice(at, n, {n});
    if (&dst.device() == &device_)
      ops::cast(values, part);
    else
      part.copy_from(values);  // fp32 state in host memory (offload)
  }
}

void ParameterStore::fill_frozen(Unit& u, int64_t begin, const Tensor& held,
                                 const std::function<void(const nn::Parameter&, int64_t, int64_t, float*)>& fill) {
  if (!device_.holds_data()) return;  // a counting device: nothing to write
  const int64_t end = begin + held.numel();
  for (size_t i = 0; i < u.params.size(); ++i) {
    const int64_t a = std::max(u.offsets[i], begin), b = std::min(u.offsets[i] + shape_numel(u.params[i]->shape), end);
    if (a >= b) continue;
    std::vector<float> v(static_cast<size_t>(b - a));
    fill(*u.params[i], a - u.offsets[i], b - a, v.data());
    // Rounded on the host as ops::cast rounds (to nearest even): the values draw_initial rounds on the device.
    const Tensor dst = held.flat_slice(a - begin, b - a, {b - a});
    if (compute_ == DType::F32) {
      dst.copy_from_host(v.data());
      continue;
    }
    std::vector<uint16_t> half(v.size());
    for (size_t k = 0; k < v.size(); ++k) half[k] = compute_ == DType::BF16 ? f32_to_bf16(v[k]) : f32_to_f16(v[k]);
    dst.copy_from_host(half.data());
  }
}

void ParameterStore::write_frozen(const std::function<void(const nn::Parameter&, int64_t, int64_t, float*)>& fill) {
  std::vector<std::unique_ptr<comm::Request>> pending;
  for (auto& u : units_) {
    if (!u->frozen) continue;
    const bool sharded = stage_ >= 1;
    const int64_t begin = sharded ? dp_.rank() * u->shard : 0, count = sharded ? u->shard : u->shard * dp_.size();
    const Tensor held = stage_ == 3 ? u->owned_values_device : u->full_values.flat_slice(begin, count, {count});
    fill_frozen(*u, begin, held, fill);
    if (stage_ == 1 || stage_ == 2) pending.push_back(dp_.all_gather_async(held, u->full_values));
  }
  for (auto& r : pending) r->wait();
}

}  // namespace tandem::parallel
