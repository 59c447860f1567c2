// Arena (the CUDA device's caching allocator bookkeeping): alignment, reuse, best fit, coalescing, growth,
// trimming and out-of-memory handling, on host memory standing in for cudaMalloc. Needs no GPU.
#include "tandem/device/cuda/arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::device {
namespace {

constexpr size_t kAlign = 256;

// Host memory as the reserved blocks; `limit` caps the bytes held at once so tests can run out.
struct FakeMemory {
  size_t limit = SIZE_MAX;
  size_t held = 0;
  std::vector<size_t> reserve_calls;
  std::set<void*> blocks;
  std::vector<std::pair<void*, size_t>> sizes;

  Arena::Reserve reserve() {
    return [this](size_t bytes) -> void* {
      reserve_calls.push_back(bytes);
      if (held + bytes > limit) return nullptr;
      void* p = std::aligned_alloc(kAlign, bytes);
      held += bytes;
      blocks.insert(p);
      sizes.emplace_back(p, bytes);
      return p;
    };
  }
  Arena::Unreserve unreserve() {
    return [this](void* p) {
      ASSERT_TRUE(blocks.count(p));
      auto it = std::find_if(sizes.begin(), sizes.end(), [p](const auto& s) { return s.first == p; });
      held -= it->second;
      sizes.erase(it);
      blocks.erase(p);
      std::free(p);
    };
  }
};

ArenaPolicy small_policy() {
  ArenaPolicy p;
  p.alignment = kAlign;
  p.first_block_bytes = 64 << 10;
  p.min_block_bytes = 32 << 10;
  p.block_granularity = 4 << 10;
  return p;
}

uintptr_t addr(void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(Arena, AlignsAndRoundsEveryRange) {
  FakeMemory mem;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  void* a = arena.allocate(1);
  void* b = arena.allocate(0);
  void* c = arena.allocate(257);
  for (void* p : {a, b, c}) EXPECT_EQ(addr(p) % kAlign, 0u);
  EXPECT_EQ(arena.range_bytes(a), 256u);
  EXPECT_EQ(arena.range_bytes(b), 256u);
  EXPECT_EQ(arena.range_bytes(c), 512u);
  EXPECT_EQ(arena.stats().used_bytes, 1024u);
  ASSERT_EQ(mem.reserve_calls.size(), 1u);
  EXPECT_EQ(mem.reserve_calls[0], 64u << 10);  // the first block is first_block_bytes, not the request
  arena.release(a);
  arena.release(b);
  arena.release(c);
  EXPECT_EQ(arena.stats().used_bytes, 0u);
}

TEST(Arena, ReusesAReleasedRange) {
  FakeMemory mem;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  void* a = arena.allocate(1000);
  arena.release(a);
  void* b = arena.allocate(1000);
  EXPECT_EQ(a, b);
  EXPECT_EQ(mem.reserve_calls.size(), 1u);
  arena.release(b);
}

TEST(Arena, PicksTheSmallestFreeRangeThatFits) {
  FakeMemory mem;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  // Free holes of 4096, 1024 and 2048 bytes, kept apart by live ranges.
  void* big = arena.allocate(4096);
  void* sep1 = arena.allocate(256);
  void* small = arena.allocate(1024);
  void* sep2 = arena.allocate(256);
  void* mid = arena.allocate(2048);
  void* sep3 = arena.allocate(256);
  arena.release(big);
  arena.release(small);
  arena.release(mid);
  EXPECT_EQ(arena.allocate(900), small);
  EXPECT_EQ(arena.allocate(1500), mid);
  EXPECT_EQ(arena.allocate(3000), big);
  for (void* p : {sep1, sep2, sep3, small, mid, big}) arena.release(p);
  EXPECT_EQ(arena.stats().free_ranges, 1u);
}

TEST(Arena, CoalescesNeighboursInAnyOrder) {
  FakeMemory mem;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  void* a = arena.allocate(256);
  void* b = arena.allocate(512);
  void* c = arena.allocate(768);
  EXPECT_EQ(addr(b), addr(a) + 256);
  EXPECT_EQ(addr(c), addr(b) + 512);
  arena.release(a);
  arena.release(c);  // a's hole, b live, c merged with the tail of the block
  EXPECT_EQ(arena.stats().free_ranges, 2u);
  arena.release(b);  // joins both sides
  const ArenaStats s = arena.stats();
  EXPECT_EQ(s.free_ranges, 1u);
  EXPECT_EQ(s.largest_free_bytes, s.reserved_bytes);
  // The whole block is one range again: a request for all of it fits without growing.
  void* all = arena.allocate(s.reserved_bytes);
  EXPECT_EQ(all, a);
  EXPECT_EQ(mem.reserve_calls.size(), 1u);
  arena.release(all);
}

TEST(Arena, GrowsByMinBlockOrByTheRequest) {
  FakeMemory mem;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  void* a = arena.allocate(60 << 10);  // fits the 64 KiB first block
  void* b = arena.allocate(8 << 10);   // does not: a min_block_bytes block
  void* c = arena.allocate(100000);    // bigger than min_block_bytes: the request, rounded to 4 KiB
  ASSERT_EQ(mem.reserve_calls.size(), 3u);
  EXPECT_EQ(mem.reserve_calls[1], 32u << 10);
  EXPECT_EQ(mem.reserve_calls[2], 102400u);  // 100000 -> 100096 (256) -> 102400 (4 KiB)
  EXPECT_EQ(arena.stats().blocks, 3u);
  for (void* p : {a, b, c}) arena.release(p);
}

TEST(Arena, DoesNotMergeAcrossBlocks) {
  FakeMemory mem;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  void* a = arena.allocate(64 << 10);  // fills block 0 exactly
  void* b = arena.allocate(32 << 10);  // fills block 1 exactly
  arena.release(a);
  arena.release(b);
  EXPECT_EQ(arena.stats().free_ranges, 2u);
  EXPECT_EQ(arena.stats().largest_free_bytes, 64u << 10);
}

TEST(Arena, TrimGivesBackOnlyIdleBlocks) {
  FakeMemory mem;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  void* a = arena.allocate(64 << 10);
  void* b = arena.allocate(1024);  // second block
  arena.release(a);
  EXPECT_EQ(arena.trim(), 64u << 10);
  EXPECT_EQ(arena.stats().blocks, 1u);
  EXPECT_EQ(mem.blocks.size(), 1u);
  arena.release(b);
  EXPECT_EQ(arena.trim(), 32u << 10);
  EXPECT_EQ(mem.blocks.size(), 0u);
  // Empty again: the next reservation is a first block.
  void* c = arena.allocate(10);
  EXPECT_EQ(mem.reserve_calls.back(), 64u << 10);
  arena.release(c);
}

TEST(Arena, OnFailureTrimsAndRetriesWithTheExactRequest) {
  FakeMemory mem;
  mem.limit = 100 << 10;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  void* a = arena.allocate(1024);  // 64 KiB block
  // 65000 bytes do not fit the 63 KiB left, and a second 64 KiB block would pass the 100 KiB limit.
  void* b = arena.allocate(65000);
  EXPECT_EQ(b, nullptr);
  arena.release(a);
  // Now the idle 64 KiB block can be given back to make room for a 80 KiB one.
  void* c = arena.allocate(80 << 10);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(arena.stats().blocks, 1u);
  EXPECT_EQ(arena.stats().reserved_bytes, 80u << 10);
  arena.release(c);
}

TEST(Arena, TakesTheLargestBlockItCanWhenTheFirstDoesNotFit) {
  FakeMemory mem;
  mem.limit = 60 << 10;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  void* a = arena.allocate(1024);  // 64 KiB do not fit; 7/8 of them (56 KiB) do
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(arena.stats().blocks, 1u);
  EXPECT_EQ(arena.stats().reserved_bytes, 56u << 10);
  EXPECT_EQ(mem.reserve_calls, (std::vector<size_t>{64 << 10, 64 << 10, 56 << 10}));
  arena.release(a);
}

TEST(Arena, ReleasingAnUnknownPointerThrows) {
  FakeMemory mem;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  void* a = arena.allocate(10);
  arena.release(a);
  EXPECT_THROW(arena.release(a), Error);
  int on_stack = 0;
  EXPECT_THROW(arena.release(&on_stack), Error);
}

TEST(Arena, DestructorGivesBackEveryBlock) {
  FakeMemory mem;
  {
    Arena arena(small_policy(), mem.reserve(), mem.unreserve());
    arena.allocate(100);
    arena.allocate(70 << 10);
  }
  EXPECT_EQ(mem.blocks.size(), 0u);
  EXPECT_EQ(mem.held, 0u);
}

// Random allocate/release: live ranges never overlap and stay inside blocks, the counters agree, and once all is
// released every block is a single free range.
TEST(Arena, RandomWorkloadKeepsInvariants) {
  FakeMemory mem;
  Arena arena(small_policy(), mem.reserve(), mem.unreserve());
  std::mt19937_64 rng(1234);
  std::vector<std::pair<uintptr_t, size_t>> live;
  size_t used = 0;
  for (int step = 0; step < 20000; ++step) {
    const bool alloc = live.empty() || rng() % 100 < 55;
    if (alloc) {
      const size_t bytes = rng() % 3 == 0 ? rng() % 40000 : rng() % 3000;
      void* p = arena.allocate(bytes);
      ASSERT_NE(p, nullptr);
      ASSERT_EQ(addr(p) % kAlign, 0u);
      const size_t rounded = arena.range_bytes(p);
      ASSERT_GE(rounded, std::max<size_t>(bytes, 1));
      ASSERT_LT(rounded - std::max<size_t>(bytes, 1), kAlign);
      live.emplace_back(addr(p), rounded);
      used += rounded;
    } else {
      const size_t i = rng() % live.size();
      arena.release(reinterpret_cast<void*>(live[i].first));
      used -= live[i].second;
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 500 == 0) {
      std::vector<std::pair<uintptr_t, size_t>> sorted = live;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 1; i < sorted.size(); ++i) ASSERT_LE(sorted[i - 1].first + sorted[i - 1].second, sorted[i].first);
      const ArenaStats s = arena.stats();
      ASSERT_EQ(s.used_bytes, used);
      ASSERT_EQ(s.live_ranges, live.size());
      ASSERT_LE(s.used_bytes, s.reserved_bytes);
    }
  }
  for (const auto& [p, bytes] : live) arena.release(reinterpret_cast<void*>(p));
  const ArenaStats s = arena.stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.free_ranges, s.blocks);
}

}  // namespace
}  // namespace tandem::device
