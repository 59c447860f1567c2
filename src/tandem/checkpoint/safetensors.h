// The safetensors file format (https://github.com/huggingface/safetensors): writing tensors from host
// memory atomically, and a validating, memory-mapped reader. Which tensors make a checkpoint is decided elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tandem/checkpoint/progress.h"
#include "tandem/core/dtype.h"
#include "tandem/core/tensor.h"

namespace tandem::checkpoint {

// A tensor to write: `data` points at shape_numel(shape) * dtype_size(dtype) bytes of host memory.
struct TensorEntry {
  std::string name;
  DType dtype;
  Shape shape;
  const void* data;
};

// A safetensors file's bytes before its tensors, known before any tensor exists: the 8-byte header length and the
// JSON header (entries sorted by name, padded with spaces so that the data section starts 8-byte aligned), and where
// each tensor starts in the data section. A writer that has the whole data section in one buffer (laid out by
// `offsets`) writes `prefix` and then that buffer: two large writes, whatever the number of tensors.
struct SafetensorsLayout {
  std::string prefix;
  std::map<std::string, size_t> offsets;  // by tensor name: the first byte in the data section
  size_t data_bytes = 0;
  uint64_t file_bytes() const { return prefix.size() + data_bytes; }
};
// `entries`' data pointers are not read. Errors (reserved, repeated or non-UTF-8 names) name `path`.
SafetensorsLayout safetensors_layout(const std::string& path, const std::vector<TensorEntry>& entries,
                                     const std::map<std::string, std::string>& metadata);

// Writes atomically (to "<path>.tmp", fsync, rename over <path>, fsync the directory). The header lists the
// entries sorted by name and the data follows in that order, starting 8-byte aligned. `progress`, when given, is
// told the tensors' bytes as they are written (not the header's).
void write_safetensors(const std::string& path, const std::vector<TensorEntry>& entries,
                       const std::map<std::string, std::string>& metadata, Progress* progress = nullptr);

// Reads a safetensors file through mmap. The constructor validates the whole header against the file
// (offsets in range, contiguous, covering the data exactly, sizes matching shapes); every error names the file.
// Only the dtypes Tandem has (F32, BF16, F16, I32) are accepted.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // These throw an Error naming the file and the missing tensor for an unknown name.
  DType dtype(const std::string& name) const;
  Shape shape(const std::string& name) const;
  const void* data(const std::string& name) const;  // read-only, valid while this object lives
  size_t nbytes(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Info {
    DType dtype;
    Shape shape;
    size_t begin, end;  // offsets into the data section
  };
  const Info& info(const std::string& name) const;
  void parse_header(size_t header_len);

  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  const uint8_t* data_section_ = nullptr;
  std::map<std::string, Info> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tandem::checkpoint
