// Fuzz target for the safetensors reader: the input is the whole file. Whatever SafetensorsFile accepts must
// be safe to use: every tensor's dtype, shape, size and bytes are read, and the bytes it hands out must be
// the file's own data section, since ASan cannot see reads past the end of an mmap.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "harness.h"
#include "tandem/checkpoint/safetensors.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/tensor.h"

namespace {

// Reads go through here so the compiler cannot drop them.
volatile uint8_t g_sink;

void check_file(const tandem::checkpoint::SafetensorsFile& st, const uint8_t* data, size_t size) {
  const auto names = st.names();
  if (!std::is_sorted(names.begin(), names.end())) tandem::fuzz::violated("names() is not sorted");

  // The tensors tile the data section from its start, so the lowest data pointer is where the section begins
  // in the mapping; it sits 8 + header_len bytes into the file.
  uint64_t header_len = 0;
  for (int b = 0; b < 8; ++b) header_len |= static_cast<uint64_t>(data[b]) << (8 * b);
  const uint8_t* section = nullptr;
  for (const std::string& name : names) {
    const auto* p = static_cast<const uint8_t*>(st.data(name));
    if (!section || p < section) section = p;
  }
  const size_t section_offset = static_cast<size_t>(8 + header_len);

  for (const std::string& name : names) {
    if (!st.contains(name)) tandem::fuzz::violated("contains('" + name + "') is false for a listed name");
    const tandem::DType dtype = st.dtype(name);
    const tandem::Shape shape = st.shape(name);
    const size_t nbytes = st.nbytes(name);
    // What a caller does with a shape read from a checkpoint: count its elements and size its buffer.
    const int64_t numel = tandem::shape_numel(shape);
    if (numel < 0 || static_cast<uint64_t>(numel) * tandem::dtype_size(dtype) != nbytes)
      tandem::fuzz::violated("tensor '" + name + "': nbytes " + std::to_string(nbytes) + " but shape " +
                             tandem::shape_str(shape) + " of " + tandem::dtype_name(dtype));
    const auto* p = static_cast<const uint8_t*>(st.data(name));
    const size_t offset = section_offset + static_cast<size_t>(p - section);
    if (offset > size || nbytes > size - offset)
      tandem::fuzz::violated("tensor '" + name + "': bytes [" + std::to_string(offset) + ", +" +
                             std::to_string(nbytes) + ") lie outside the " + std::to_string(size) + "-byte file");
    if (nbytes > 0) {
      g_sink = p[0];
      g_sink = p[nbytes - 1];
      if (std::memcmp(p, data + offset, nbytes) != 0)
        tandem::fuzz::violated("tensor '" + name + "': its bytes differ from the file's at offset " +
                               std::to_string(offset));
    }
  }
  for (const auto& [key, value] : st.metadata()) g_sink = static_cast<uint8_t>(key.size() + value.size());

  // An unknown name must be an Error naming the file, not a lookup past the map.
  const std::string probe = "\x01not a tensor name";
  if (!st.contains(probe)) {
    try {
      (void)st.dtype(probe);
      tandem::fuzz::violated("dtype() of an unknown name did not throw");
    } catch (const tandem::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tandem::fuzz::ScratchFile file("safetensors");
  file.write(data, size);
  // Only tandem::Error is expected: the reader promises errors that name the file, so a nlohmann exception
  // escaping it is a finding too.
  try {
    const tandem::checkpoint::SafetensorsFile st(file.path());
    check_file(st, data, size);
  } catch (const tandem::Error&) {
  }
  return 0;
}
