// Arena: the bookkeeping of a caching allocator, without any CUDA call. It carves aligned ranges out of large
// blocks that a callback reserves (on CUDA: cudaMalloc), serves each request from the smallest free range that
// fits (best fit), and merges a released range with its free neighbours in the same block (coalescing).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem::device {

struct ArenaPolicy {
  size_t alignment = 256;                      // every range starts and ends on this (a power of two)
  size_t first_block_bytes = size_t{1} << 30;  // the first reservation (e.g. the whole budget)
  size_t min_block_bytes = size_t{1} << 30;    // later reservations: at least this, or the request
  size_t block_granularity = size_t{2} << 20;  // reservations are rounded up to this (2 MiB)
};

struct ArenaStats {
  size_t reserved_bytes = 0;  // sum of block sizes
  size_t used_bytes = 0;      // sum of live range sizes (rounded to the alignment)
  size_t largest_free_bytes = 0;
  size_t blocks = 0;
  size_t free_ranges = 0;
  size_t live_ranges = 0;
};

class Arena {
 public:
  // reserve(bytes) returns the base of a new block of exactly `bytes` bytes, aligned to policy.alignment, or
  // nullptr when the memory is not there. unreserve(base) gives a whole block back.
  using Reserve = std::function<void*(size_t bytes)>;
  using Unreserve = std::function<void(void* base)>;

  Arena(ArenaPolicy policy, Reserve reserve, Unreserve unreserve);
  ~Arena();  // gives every block back, live ranges or not (the owner frees its users first)
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A range of at least `bytes` bytes (0 counts as 1), or nullptr when no block has room and reserve() failed
  // even after the wholly free blocks were given back. When the block it wants cannot be had, it takes the largest
  // of 7/8, (7/8)^2, ... of it that can, and at least the request.
  void* allocate(size_t bytes);
  // Returns a range from allocate() to the free list; the memory stays reserved. Unknown pointers throw.
  void release(void* ptr);
  // Gives back the blocks that hold no live range. Returns the bytes given back.
  size_t trim();

  ArenaStats stats() const;
  // The rounded size of a live range (for tests and messages); 0 for an unknown pointer.
  size_t range_bytes(void* ptr) const;

 private:
  struct Block {
    char* base;
    size_t bytes;
    size_t live = 0;  // live ranges inside, so trim() knows which blocks are idle
  };
  struct FreeRange {
    size_t bytes;
    size_t block;  // index into blocks_
  };
  struct LiveRange {
    size_t bytes;
    size_t block;
  };

  size_t round_up(size_t n, size_t to) const { return (n + to - 1) / to * to; }
  bool grow(size_t bytes);  // reserves one more block big enough for `bytes`
  void insert_free(char* addr, size_t bytes, size_t block);
  void erase_free(std::map<char*, FreeRange>::iterator it);

  ArenaPolicy policy_;
  Reserve reserve_;
  Unreserve unreserve_;
  std::vector<Block> blocks_;                // a given-back block stays as a tombstone (base nullptr) so indices hold
  std::map<char*, FreeRange> free_by_addr_;  // for coalescing with neighbours
  std::set<std::pair<size_t, char*>> free_by_size_;  // for best fit: smallest size, then lowest address
  std::unordered_map<char*, LiveRange> live_;
  size_t used_ = 0;
};

}  // namespace tandem::device
