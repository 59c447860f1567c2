// Internal to tandem_data: a read-only memory map of a whole file, so token files are paged in on demand
// rather than read whole. It knows nothing about what the bytes mean.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::data {

class MappedFile {
 public:
  // Throws an Error naming `what` ("token file") and the path when the file cannot be opened or mapped.
  MappedFile(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Read-ahead for a pass over the whole file (true), or none for random windows (false, the default).
  void advise_sequential(bool sequential) const;

 private:
  const uint8_t* data_ = nullptr;  // null for an empty file, which cannot be mapped
  size_t size_ = 0;
};

}  // namespace tandem::data
