#include "tandem/parallel/zero/swap_files.h"

#include <algorithm>

namespace tandem::parallel {

namespace {

constexpr uint64_t kAlign = checkpoint::SwapFile::kAlignment;

// Room for `bytes` of `dtype` in host memory at an address aligned for direct I/O (host allocations are 64-byte
// aligned: one alignment of slack is enough).
Tensor aligned_buffer(Device& host, uint64_t bytes, DType dtype, const std::string& what) {
  const auto size = static_cast<uint64_t>(dtype_size(dtype));
  Tensor t = Tensor::empty({static_cast<int64_t>((bytes + kAlign) / size)}, dtype, host, what);
  const auto address = reinterpret_cast<uintptr_t>(t.raw());
  const auto skip = static_cast<int64_t>((kAlign - address % kAlign) % kAlign / size);
  const auto n = static_cast<int64_t>(bytes / size);
  return t.flat_slice(skip, n, {n});
}

}  // namespace

void SwapFiles::place_state(Unit& u, int64_t owned) {
  u.swap_part = checkpoint::SwapFile::round_up(static_cast<uint64_t>(owned) * 4);
  u.swap_offset = state_bytes_;
  state_bytes_ += 3 * u.swap_part;
}

void SwapFiles::place_values(Unit& u, int64_t owned) {
  u.values_bytes = checkpoint::SwapFile::round_up(static_cast<uint64_t>(owned) * dtype_size(compute_));
  u.values_offset = values_bytes_;
  values_bytes_ += u.values_bytes;
}

void SwapFiles::open(const std::vector<std::unique_ptr<Unit>>& units, bool files, const spec::OffloadConfig& optimizer,
                     const spec::OffloadConfig& param, const std::string& owner) {
  uint64_t largest = 0, largest_values = 0;
  for (const auto& u : units) {
    if (u->state == Where::SwapFile) largest = std::max(largest, 3 * u->swap_part);
    if (u->owned_values == Where::SwapFile) largest_values = std::max(largest_values, u->values_bytes);
  }
  if (largest > 0) {
    PurposeScope scope(*host_, MemoryPurpose::Optimizer);
    state_buffer_ = aligned_buffer(*host_, largest, DType::F32, "swap buffer");
  }
  if (largest_values > 0) {
    PurposeScope scope(*host_, MemoryPurpose::Parameters);
    values_buffer_ = aligned_buffer(*host_, largest_values, compute_, "parameter swap buffer");
    values_update_buffer_ = aligned_buffer(*host_, largest_values, compute_, "parameter swap buffer (update)");
  }
  if (!files) return;
  if (values_bytes_ > 0)
    values_ =
        std::make_unique<checkpoint::SwapFile>(param.nvme_path, values_bytes_, "the offloaded parameters of " + owner);
  if (state_bytes_ > 0)
    state_ = std::make_unique<checkpoint::SwapFile>(optimizer.nvme_path, state_bytes_,
                                                    "the offloaded optimizer state of " + owner);
}

void SwapFiles::write_initial(const Unit& u, const std::function<void(const Tensor&)>& draw) {
  const int64_t mn = u.owned_grads.numel();
  const Tensor master = state_buffer_.flat_slice(0, mn, {mn});
  master.fill_zero();
  draw(master);
  state_->write(u.swap_offset, state_buffer_.raw(), u.swap_part);
}

std::array<Tensor, 3> SwapFiles::read_state(const Unit& u, bool own_buffer) {
  const Tensor buffer =
      own_buffer ? aligned_buffer(*host_, 3 * u.swap_part, DType::F32, u.label + " paged in") : state_buffer_;
  const int64_t mn = u.owned_grads.numel(), part = static_cast<int64_t>(u.swap_part / 4);
  if (state_) state_->read(u.swap_offset, buffer.raw(), 3 * u.swap_part);
  return {buffer.flat_slice(0, mn, {mn}), buffer.flat_slice(part, mn, {mn}), buffer.flat_slice(2 * part, mn, {mn})};
}

void SwapFiles::write_state(const Unit& u, const Tensor& master) {
  if (state_) state_->write(u.swap_offset, master.raw(), 3 * u.swap_part);
}

Tensor SwapFiles::values(const Unit& u, bool read, bool updating) {
  const int64_t mn = u.owned_grads.numel();
  const Tensor& buffer = updating ? values_update_buffer_ : values_buffer_;
  if (read && values_) values_->read(u.values_offset, buffer.raw(), u.values_bytes);
  return buffer.flat_slice(0, mn, {mn});
}

void SwapFiles::write_values(const Unit& u, const Tensor& values) {
  if (values_) values_->write(u.values_offset, values.raw(), u.values_bytes);
}

}  // namespace tandem::parallel
