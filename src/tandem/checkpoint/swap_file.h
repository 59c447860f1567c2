// SwapFile: one process's scratch file on a fast disk, read and written in place at offsets: where an nvme offload
// keeps the state that does not stay in host memory. The file has no name (it is gone, with its space, when the
// process ends, however it ends), its space is reserved when it is made (a full disk is found then, not in the middle
// of a step), and it is read and written past the page cache (O_DIRECT) where the filesystem allows, so a swap does
// not fill host memory with cached pages. It knows nothing of what it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::checkpoint {

class SwapFile {
 public:
  // Offsets, sizes and buffer addresses of direct reads and writes are multiples of this.
  static constexpr size_t kAlignment = 4096;

  // A file of `bytes` (rounded up to kAlignment) in the folder `dir`. `what` names it in messages ("the optimizer
  // state of rank 3"). Throws Error saying what to do when the folder is missing, not writable or too small.
  SwapFile(const std::string& dir, uint64_t bytes, const std::string& what);
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  // Whole transfers of `bytes` at `offset`; with direct() each must be aligned as above. Throw Error on a failure.
  // Safe to call from several threads at once on disjoint ranges.
  void read(uint64_t offset, void* dst, size_t bytes) const;
  void write(uint64_t offset, const void* src, size_t bytes) const;

  uint64_t bytes() const { return bytes_; }
  bool direct() const { return direct_; }  // past the page cache
  const std::string& dir() const { return dir_; }

  static uint64_t round_up(uint64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

 private:
  std::string dir_, what_;
  uint64_t bytes_ = 0;
  int fd_ = -1;
  bool direct_ = false;
};

}  // namespace tandem::checkpoint
