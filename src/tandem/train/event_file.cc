// TensorBoard event files (event_file.h). Field numbers, from tensorboard's event.proto and summary.proto:
// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; },
// Summary { repeated Value value = 1; }, Summary.Value { string tag = 1; float simple_value = 2; }.
#include "tandem/train/event_file.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "tandem/core/error.h"

namespace tandem::train {

namespace fs = std::filesystem;

namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// Protobuf's wire format, the pieces these messages need.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field << 3 | wire_type));
}
template <class T>
void put_fixed(std::string& out, T v) {  // little-endian, as protobuf and TFRecord store them (x86, ARM)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < bytes; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t bytes) {
  const uint32_t c = crc32c(data, bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) TANDEM_FAIL("cannot create the TensorBoard folder '", dir, "': ", ec.message());
  const double start = now_seconds();
  const std::string base = "events.out.tfevents." + std::to_string(static_cast<int64_t>(start)) + "." + host_name() +
                           "." + std::to_string(::getpid()) + ".";
  for (int n = 0;; ++n) {
    path_ = (fs::path(dir) / (base + std::to_string(n))).string();
    file_ = std::fopen(path_.c_str(), "wbx");  // x: never an existing file
    if (file_ || errno != EEXIST) break;
  }
  if (!file_) TANDEM_FAIL("cannot create the TensorBoard event file '", path_, "': ", std::strerror(errno));
  std::string event;
  put_key(event, 1, 1);
  put_fixed(event, start);
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
  flush();
}

EventFileWriter::~EventFileWriter() {
  if (file_) std::fclose(file_);
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);
  put_fixed(v, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, v);
  std::string event;
  put_key(event, 1, 1);
  put_fixed(event, wall_time);
  put_key(event, 2, 0);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes(event, 5, summary);
  write_record(event);
}

void EventFileWriter::write_record(const std::string& event) {
  std::string record;
  const uint64_t length = event.size();
  put_fixed(record, length);
  put_fixed(record, masked_crc32c(record.data(), 8));
  record += event;
  put_fixed(record, masked_crc32c(event.data(), event.size()));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
    TANDEM_FAIL("cannot write the TensorBoard event file '", path_, "': ", std::strerror(errno));
}

void EventFileWriter::flush() {
  if (std::fflush(file_) != 0)
    TANDEM_FAIL("cannot write the TensorBoard event file '", path_, "': ", std::strerror(errno));
}

}  // namespace tandem::train
