// ParameterStore's nvme offload (parameter_store.h): the swapped units' fp32 master and moments in the rank's swap
// file, one region a unit (three aligned parts), paged into one host buffer for each use (the host AdamW, a
// checkpoint's visit) and written back; with offload_param to nvme, each unit's owned compute-dtype values in a
// second file, read into a second buffer before each gather. On a counting device nothing is read or written: the
// planner only learns the files' sizes and the buffers' bytes.
#include "tandem/ops/ops.h"
#include "tandem/parallel/zero/parameter_store.h"

namespace tandem::parallel {

namespace {

constexpr uint64_t kAlign = checkpoint::SwapFile::kAlignment;

// Room for `bytes` of `dtype` in host memory at an address aligned for direct I/O (host allocations are 64-byte
// aligned: one alignment of slack is enough). A counting host's addresses are not real: nothing to slice off.
Tensor aligned_buffer(Device& host, uint64_t bytes, DType dtype, const std::string& what) {
  const auto size = static_cast<uint64_t>(dtype_size(dtype));
  Tensor t = Tensor::empty({static_cast<int64_t>((bytes + kAlign) / size)}, dtype, host, what);
  if (!host.holds_data()) return t;
  const auto address = reinterpret_cast<uintptr_t>(t.raw());
  const auto skip = static_cast<int64_t>((kAlign - address % kAlign) % kAlign / size);
  const auto n = static_cast<int64_t>(bytes / size);
  return t.flat_slice(skip, n, {n});
}

}  // namespace

void ParameterStore::make_swap(const spec::OffloadConfig& optimizer, const spec::OffloadConfig& param, uint64_t seed) {
  uint64_t largest = 0, largest_values = 0;
  for (const auto& u : units_) {
    if (u->swapped) largest = std::max(largest, 3 * u->swap_part);
    if (u->values_swapped) largest_values = std::max(largest_values, u->values_bytes);
  }
  if (largest > 0) {
    PurposeScope scope(host(), MemoryPurpose::Optimizer);
    swap_buffer_ = aligned_buffer(host(), largest, DType::F32, "swap buffer");
  }
  if (largest_values > 0) {
    PurposeScope scope(host(), MemoryPurpose::Parameters);
    values_buffer_ = aligned_buffer(host(), largest_values, compute_, "parameter swap buffer");
    values_update_buffer_ = aligned_buffer(host(), largest_values, compute_, "parameter swap buffer (update)");
  }
  if (!device_.holds_data()) return;
  const std::string rank = "dp rank " + std::to_string(dp_.rank());
  if (values_swap_bytes_ > 0)
    values_swap_ = std::make_unique<checkpoint::SwapFile>(param.nvme_path, values_swap_bytes_,
                                                          "the offloaded parameters of " + rank);
  if (swap_bytes_ == 0) return;
  swap_ = std::make_unique<checkpoint::SwapFile>(optimizer.nvme_path, swap_bytes_,
                                                 "the offloaded optimizer state of " + rank);
  // The moments start at zero, as the file's reserved space reads; each master is drawn from the seed and written.
  for (const auto& u : units_) {
    if (!u->swapped) continue;
    const int64_t mn = u->grad_shard.numel(), m0 = stage_ == 0 ? 0 : dp_.rank() * u->shard;
    const Tensor master = swap_buffer_.flat_slice(0, mn, {mn});
    master.fill_zero();
    for (size_t i = 0; i < u->params.size(); ++i) {
      const int64_t a = std::max(u->offsets[i], m0),
                    b = std::min(u->offsets[i] + shape_numel(u->params[i]->shape), m0 + mn);
      if (a < b)
        nn::initialize_parameter(*u->params[i], master.flat_slice(a - m0, b - a, {b - a}), seed, a - u->offsets[i]);
    }
    swap_->write(u->swap_offset, swap_buffer_.raw(), u->swap_part);
  }
}

std::array<Tensor, 3> ParameterStore::swap_in(const Unit& u, bool own_buffer) {
  const Tensor buffer =
      own_buffer ? aligned_buffer(host(), 3 * u.swap_part, DType::F32, u.label + " paged in") : swap_buffer_;
  const int64_t mn = u.grad_shard.numel(), part = static_cast<int64_t>(u.swap_part / 4);
  if (swap_) swap_->read(u.swap_offset, buffer.raw(), 3 * u.swap_part);
  return {buffer.flat_slice(0, mn, {mn}), buffer.flat_slice(part, mn, {mn}), buffer.flat_slice(2 * part, mn, {mn})};
}

void ParameterStore::swap_out(const Unit& u, const Tensor& master) {
  if (swap_) swap_->write(u.swap_offset, master.raw(), 3 * u.swap_part);
}

Tensor ParameterStore::host_values_of(const Unit& u, bool read, bool updating) {
  if (!u.values_swapped) return u.host_values;
  const int64_t mn = u.grad_shard.numel();
  const Tensor& buffer = updating ? values_update_buffer_ : values_buffer_;
  if (read && values_swap_) values_swap_->read(u.values_offset, buffer.raw(), u.values_bytes);
  return buffer.flat_slice(0, mn, {mn});
}

}  // namespace tandem::parallel
