// Arena bookkeeping: best fit over a size-ordered set, coalescing over an address-ordered map.
// Invariant: no two free ranges of one block touch (every release merges), so an idle block is one free range.
#include "tandem/device/cuda/arena.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "tandem/core/error.h"

namespace tandem::device {

Arena::Arena(ArenaPolicy policy, Reserve reserve, Unreserve unreserve)
    : policy_(policy), reserve_(std::move(reserve)), unreserve_(std::move(unreserve)) {
  TANDEM_CHECK(policy_.alignment > 0 && (policy_.alignment & (policy_.alignment - 1)) == 0, "arena alignment ",
               policy_.alignment, " is not a power of two");
  TANDEM_CHECK(policy_.block_granularity % policy_.alignment == 0, "arena block granularity ",
               policy_.block_granularity, " is not a multiple of the alignment ", policy_.alignment);
}

Arena::~Arena() {
  for (const Block& b : blocks_)
    if (b.base) unreserve_(b.base);
}

void Arena::insert_free(char* addr, size_t bytes, size_t block) {
  free_by_addr_.emplace(addr, FreeRange{bytes, block});
  free_by_size_.emplace(bytes, addr);
}

void Arena::erase_free(std::map<char*, FreeRange>::iterator it) {
  free_by_size_.erase({it->second.bytes, it->first});
  free_by_addr_.erase(it);
}

bool Arena::grow(size_t need) {
  const bool empty = std::none_of(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.base != nullptr; });
  const size_t wanted = std::max(need, empty ? policy_.first_block_bytes : policy_.min_block_bytes);
  size_t bytes = round_up(wanted, policy_.block_granularity);
  void* base = reserve_(bytes);
  if (!base) {
    // The big reservation did not fit: give back the idle blocks and ask again, then for 7/8 of it at a time down to
    // just this request. The largest block that can be had keeps later requests from falling between blocks.
    trim();
    const size_t least = round_up(need, policy_.block_granularity);
    base = reserve_(bytes);
    while (!base && bytes > least) {
      bytes = std::max(least, round_up(bytes / 8 * 7, policy_.block_granularity));
      base = reserve_(bytes);
    }
    if (!base) return false;
  }
  TANDEM_CHECK(reinterpret_cast<uintptr_t>(base) % policy_.alignment == 0, "arena block at ", base,
               " is not aligned to ", policy_.alignment);
  // Reuse a tombstone slot so the block list does not grow with every trim and regrow.
  size_t index = blocks_.size();
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (!blocks_[i].base) {
      index = i;
      break;
    }
  if (index == blocks_.size()) blocks_.push_back({});
  blocks_[index] = Block{static_cast<char*>(base), bytes, 0};
  insert_free(static_cast<char*>(base), bytes, index);
  return true;
}

void* Arena::allocate(size_t bytes) {
  if (bytes > std::numeric_limits<size_t>::max() - policy_.block_granularity) return nullptr;
  const size_t need = round_up(std::max<size_t>(bytes, 1), policy_.alignment);
  auto fit = free_by_size_.lower_bound({need, nullptr});
  if (fit == free_by_size_.end()) {
    if (!grow(need)) return nullptr;
    fit = free_by_size_.lower_bound({need, nullptr});
    TANDEM_CHECK(fit != free_by_size_.end(), "arena grew but has no range of ", need, " bytes");
  }
  char* addr = fit->second;
  auto range_it = free_by_addr_.find(addr);
  const FreeRange range = range_it->second;
  erase_free(range_it);
  // The tail stays free; it cannot touch another free range, since the range it came from did not.
  if (range.bytes > need) insert_free(addr + need, range.bytes - need, range.block);
  live_.emplace(addr, LiveRange{need, range.block});
  ++blocks_[range.block].live;
  used_ += need;
  return addr;
}

void Arena::release(void* ptr) {
  char* addr = static_cast<char*>(ptr);
  auto it = live_.find(addr);
  TANDEM_CHECK(it != live_.end(), "arena release of ", ptr, ", which it did not hand out (or already took back)");
  const LiveRange range = it->second;
  live_.erase(it);
  used_ -= range.bytes;
  --blocks_[range.block].live;

  size_t bytes = range.bytes;
  // Merge with the free range right after, then with the one right before, if they lie in the same block
  // (two cudaMalloc blocks may happen to be adjacent in the address space; they must stay apart for trim()).
  auto next = free_by_addr_.find(addr + bytes);
  if (next != free_by_addr_.end() && next->second.block == range.block) {
    bytes += next->second.bytes;
    erase_free(next);
  }
  auto prev = free_by_addr_.lower_bound(addr);
  if (prev != free_by_addr_.begin()) {
    --prev;
    if (prev->second.block == range.block && prev->first + prev->second.bytes == addr) {
      addr = prev->first;
      bytes += prev->second.bytes;
      erase_free(prev);
    }
  }
  insert_free(addr, bytes, range.block);
}

size_t Arena::trim() {
  size_t given_back = 0;
  for (Block& b : blocks_) {
    if (!b.base || b.live != 0) continue;
    auto it = free_by_addr_.find(b.base);
    TANDEM_CHECK(it != free_by_addr_.end() && it->second.bytes == b.bytes, "idle arena block at ",
                 static_cast<void*>(b.base), " is not one free range");
    erase_free(it);
    unreserve_(b.base);
    given_back += b.bytes;
    b = Block{nullptr, 0, 0};
  }
  return given_back;
}

ArenaStats Arena::stats() const {
  ArenaStats s;
  for (const Block& b : blocks_) {
    if (!b.base) continue;
    s.reserved_bytes += b.bytes;
    ++s.blocks;
  }
  s.used_bytes = used_;
  s.largest_free_bytes = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  s.free_ranges = free_by_addr_.size();
  s.live_ranges = live_.size();
  return s;
}

size_t Arena::range_bytes(void* ptr) const {
  auto it = live_.find(static_cast<char*>(ptr));
  return it == live_.end() ? 0 : it->second.bytes;
}

}  // namespace tandem::device
