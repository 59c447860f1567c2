// TensorBoard's event files, written without TensorFlow: a TFRecord file (each record: its length as uint64, the
// masked CRC32C of those 8 bytes, the data, the masked CRC32C of the data) of protobuf `Event` messages, the first
// with file_version "brain.Event:2", the others each a `Summary` of one scalar (tag, simple_value) at a step. Only
// these few fields are written, so they are encoded here by hand (protobuf's wire format: varints, fixed 32/64-bit
// values and length-delimited fields) rather than through protoc and libprotobuf, which would add a generated-code
// build step for five fields. It knows nothing of what the scalars mean (monitor.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord uses, table-driven: Debian packages no
// C library of it (only Python wrappers), and zlib's CRC-32 is another polynomial.
uint32_t crc32c(const void* data, size_t bytes);
// TFRecord's mask of a CRC: rotated right by 15 bits, plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t bytes);

class EventFileWriter {
 public:
  // Creates `dir` when missing and a new file in it named as TensorFlow names them
  // (events.out.tfevents.<seconds>.<host>.<pid>.<n>, n counting up past any file of that name), so that a file
  // already there is never written over. Writes the file_version record.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One scalar at `step`, stored as float32 (TensorBoard's simple_value).
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tandem::train
