// Crash-safe file writes (write a temporary, fsync, rename over the target, fsync the directory) and file
// checksums. What goes into a checkpoint and where is decided elsewhere in tandem/checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::checkpoint {

class Progress;  // progress.h

// Streams a file into "<path>.tmp" and, on commit(), makes it appear at <path> atomically: readers see the
// old file or the whole new one, never a torn one, even across a power cut.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();  // removes the temporary when commit() was not reached (an exception on the way)
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void commit();

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
};

// Writes `bytes` to `path` atomically, as AtomicFileWriter does.
void write_file_atomic(const std::string& path, const std::string& bytes);

// fsync on a directory, so that a rename or a new entry in it survives a crash.
void fsync_directory(const std::string& dir);

// The zlib CRC-32 of the file's contents, read in chunks; `progress`, when given, is told the bytes read.
uint32_t crc32_file(const std::string& path, Progress* progress = nullptr);

// The zlib CRC-32 of `bytes` more bytes after `crc` (0 to start), of any length: crc32_file of a file written from
// these bytes in this order.
uint32_t crc32_bytes(uint32_t crc, const void* data, size_t bytes);

}  // namespace tandem::checkpoint
