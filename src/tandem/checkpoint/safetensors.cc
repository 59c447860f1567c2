// Writing and validating safetensors files (see safetensors.h). The format: an 8-byte little-endian header
// length N, N bytes of JSON header, then the tensors' bytes, back to back.
#include "tandem/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "tandem/checkpoint/atomic_file.h"
#include "tandem/checkpoint/progress.h"
#include "tandem/core/error.h"

namespace tandem::checkpoint {
namespace {

using Json = nlohmann::json;

template <class... Args>
[[noreturn]] void fail_file(const std::string& path, Args&&... args) {
  TANDEM_FAIL("safetensors file '", path, "': ", std::forward<Args>(args)...);
}

const char* format_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I32:
      return "I32";
    case DType::E4M3:
      return "F8_E4M3";
    case DType::E5M2:
      return "F8_E5M2";
  }
  return "?";
}

std::optional<DType> parse_dtype(const std::string& s) {
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::E4M3, DType::E5M2})
    if (s == format_dtype(t)) return t;
  return std::nullopt;
}

// Dtypes the format defines that Tandem has no tensors for, told apart from misspellings in messages.
bool is_foreign_dtype(const std::string& s) {
  for (const char* d : {"BOOL", "U8", "I8", "U16", "I16", "U32", "U64", "I64", "F64", "F8_E4M3", "F8_E5M2"})
    if (s == d) return true;
  return false;
}

std::optional<uint64_t> as_size(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

}  // namespace

SafetensorsLayout safetensors_layout(const std::string& path, const std::vector<TensorEntry>& entries,
                                     const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorEntry*> sorted;
  for (const auto& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const TensorEntry* a, const TensorEntry* b) { return a->name < b->name; });

  SafetensorsLayout layout;
  Json header = Json::object();
  size_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TensorEntry& e = *sorted[i];
    if (e.name.empty() || e.name == "__metadata__")
      TANDEM_FAIL("cannot write '", path, "': tensor name '", e.name, "' is reserved or empty");
    if (i > 0 && sorted[i - 1]->name == e.name)
      TANDEM_FAIL("cannot write '", path, "': two tensors are named '", e.name, "'");
    for (int64_t d : e.shape)
      TANDEM_CHECK(d >= 0, "tensor '", e.name, "' has shape ", shape_str(e.shape), " for '", path, "'");
    const size_t bytes = static_cast<size_t>(shape_numel(e.shape)) * dtype_size(e.dtype);
    header[e.name] = {{"dtype", format_dtype(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    layout.offsets[e.name] = offset;
    offset += bytes;
  }
  layout.data_bytes = offset;
  if (!metadata.empty()) header["__metadata__"] = metadata;

  // Spaces after the JSON are allowed by the format; they put the data on an 8-byte boundary, so the
  // mapped tensors can be read as floats without misaligned loads.
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::type_error&) {
    TANDEM_FAIL("cannot write '", path, "': a tensor name or metadata string is not valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  layout.prefix.resize(8);
  for (int b = 0; b < 8; ++b)
    layout.prefix[static_cast<size_t>(b)] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * b));
  layout.prefix += text;
  return layout;
}

void write_safetensors(const std::string& path, const std::vector<TensorEntry>& entries,
                       const std::map<std::string, std::string>& metadata, Progress* progress) {
  const SafetensorsLayout layout = safetensors_layout(path, entries, metadata);
  std::vector<const TensorEntry*> sorted;
  for (const auto& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const TensorEntry* a, const TensorEntry* b) { return a->name < b->name; });

  AtomicFileWriter out(path);
  out.write(layout.prefix.data(), layout.prefix.size());
  for (const TensorEntry* e : sorted) {
    const size_t bytes = static_cast<size_t>(shape_numel(e->shape)) * dtype_size(e->dtype);
    TANDEM_CHECK(e->data != nullptr || bytes == 0, "tensor '", e->name, "' has no data for '", path, "'");
    if (bytes == 0) continue;
    out.write(e->data, bytes);
    if (progress) progress->add(bytes);
  }
  out.commit();
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_file(path, "cannot open it (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail_file(path, "not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail_file(path, "only ", size_, " bytes, too short for the 8-byte header length: the file is truncated");
  }
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail_file(path, "cannot memory-map it (", std::strerror(err), ")");
  map_ = static_cast<const uint8_t*>(p);
  try {
    uint64_t header_len = 0;
    for (int b = 0; b < 8; ++b) header_len |= static_cast<uint64_t>(map_[b]) << (8 * b);
    if (header_len > size_ - 8)
      fail_file(path, "the header length field says ", header_len, " bytes but only ", size_ - 8,
                " bytes follow it: the file is truncated or not a safetensors file");
    parse_header(static_cast<size_t>(header_len));
  } catch (...) {
    ::munmap(const_cast<uint8_t*>(map_), size_);  // the destructor does not run for a failed constructor
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
}

void SafetensorsFile::parse_header(size_t header_len) {
  const char* text = reinterpret_cast<const char*>(map_ + 8);
  const Json header = Json::parse(text, text + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded())
    fail_file(path_, "its ", header_len, "-byte header is not valid JSON: the file is corrupt or not safetensors");
  if (!header.is_object()) fail_file(path_, "its header is not a JSON object");
  data_section_ = map_ + 8 + header_len;
  const size_t data_size = size_ - 8 - header_len;

  std::vector<std::tuple<size_t, size_t, std::string>> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail_file(path_, "__metadata__ is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail_file(path_, "__metadata__ value of '", key, "' is not a string");
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) fail_file(path_, "the header entry of tensor '", name, "' is not a JSON object");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(key)) fail_file(path_, "tensor '", name, "' has no '", key, "' in the header");

    const Json& dt = entry.at("dtype");
    const std::string dtype_text = dt.is_string() ? dt.get<std::string>() : dt.dump();
    const std::optional<DType> dtype = parse_dtype(dtype_text);
    if (!dtype && is_foreign_dtype(dtype_text))
      fail_file(path_, "tensor '", name, "' has dtype ", dtype_text,
                ", which Tandem cannot load (it supports F32, BF16, F16 and I32)");
    if (!dtype) fail_file(path_, "tensor '", name, "' has unknown dtype ", dtype_text);

    const Json& sh = entry.at("shape");
    if (!sh.is_array()) fail_file(path_, "tensor '", name, "' has a shape that is not an array: ", sh.dump());
    Shape shape;
    uint64_t numel = 1;
    for (const Json& d : sh) {
      const std::optional<uint64_t> dim = as_size(d);
      // Every partial product must fit int64 too: Shape arithmetic (shape_numel) multiplies in that order.
      if (!dim || *dim > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, *dim, &numel) ||
          numel > static_cast<uint64_t>(INT64_MAX))
        fail_file(path_, "tensor '", name, "' has an invalid shape ", sh.dump());
      shape.push_back(static_cast<int64_t>(*dim));
    }

    const Json& off = entry.at("data_offsets");
    const std::optional<uint64_t> begin = off.is_array() && off.size() == 2 ? as_size(off[0]) : std::nullopt;
    const std::optional<uint64_t> end = off.is_array() && off.size() == 2 ? as_size(off[1]) : std::nullopt;
    if (!begin || !end || *begin > *end)
      fail_file(path_, "tensor '", name, "' has data_offsets ", off.dump(),
                "; expected [begin, end] with begin <= end");
    if (*end > data_size)
      fail_file(path_, "tensor '", name, "' has data_offsets ", off.dump(), " beyond the ", data_size,
                "-byte data section: the file is truncated or corrupt");
    uint64_t expected = 0;
    if (__builtin_mul_overflow(numel, dtype_size(*dtype), &expected) || *end - *begin != expected)
      fail_file(path_, "tensor '", name, "' spans ", *end - *begin, " bytes but its shape ", shape_str(shape), " of ",
                dtype_text, " needs ", numel * dtype_size(*dtype));
    tensors_[name] = Info{*dtype, shape, static_cast<size_t>(*begin), static_cast<size_t>(*end)};
    spans.emplace_back(*begin, *end, name);
  }

  // The format requires the tensors to tile the data section exactly: no gaps, no overlaps, nothing after.
  std::sort(spans.begin(), spans.end());
  size_t covered = 0;
  for (const auto& [begin, end, name] : spans) {
    if (begin < covered)
      fail_file(path_, "tensor '", name, "' at bytes [", begin, ", ", end, ") overlaps the one before");
    if (begin > covered)
      fail_file(path_, "bytes [", covered, ", ", begin, ") of the data section belong to no tensor (before '", name,
                "')");
    covered = end;
  }
  if (covered != data_size)
    fail_file(path_, "the data section has ", data_size, " bytes but the tensors cover only ", covered,
              ": trailing bytes or a corrupt header");
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : tensors_) out.push_back(name);
  return out;
}

const SafetensorsFile::Info& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string some;
    for (auto j = tensors_.begin(); j != tensors_.end() && std::distance(tensors_.begin(), j) < 3; ++j)
      some += (some.empty() ? "'" : ", '") + j->first + "'";
    fail_file(path_, "no tensor named '", name, "' (it holds ", tensors_.size(), " tensors",
              some.empty() ? "" : ", e.g. " + some, ")");
  }
  return it->second;
}

DType SafetensorsFile::dtype(const std::string& name) const { return info(name).dtype; }
Shape SafetensorsFile::shape(const std::string& name) const { return info(name).shape; }
const void* SafetensorsFile::data(const std::string& name) const { return data_section_ + info(name).begin; }
size_t SafetensorsFile::nbytes(const std::string& name) const {
  const Info& i = info(name);
  return i.end - i.begin;
}

}  // namespace tandem::checkpoint
