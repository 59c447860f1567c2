// Tests of the safetensors writer and reader and of atomic file writes; checkpoint layout and resume are
// tested with the rest of tandem/checkpoint.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "tandem/checkpoint/atomic_file.h"
#include "tandem/checkpoint/safetensors.h"
#include "tandem/core/error.h"
#include "test_util.h"

namespace tandem::checkpoint {
namespace {

using tandem::testing::error_of;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() / ("tandem_safetensors_test_" + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::string read(const std::string& path) const {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void write(const std::string& path, const std::string& bytes) const {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  // A file with an 8-byte length and then `header` verbatim, followed by `data`.
  std::string raw_file(const std::string& name, const std::string& header, const std::string& data = "") const {
    std::string bytes(8, '\0');
    for (int b = 0; b < 8; ++b) bytes[b] = static_cast<char>((static_cast<uint64_t>(header.size()) >> (8 * b)) & 0xff);
    const std::string p = file(name);
    write(p, bytes + header + data);
    return p;
  }

  std::filesystem::path dir_;
};

TEST_F(Safetensors, RoundTripSeveralDtypesAndShapes) {
  std::vector<float> w(2 * 3 * 4);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * static_cast<float>(i) - 3.0f;
  std::vector<uint16_t> h(5);
  for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(static_cast<float>(i) * 1.25f);
  std::vector<uint16_t> f(7);
  for (size_t i = 0; i < f.size(); ++i) f[i] = f32_to_f16(static_cast<float>(i) - 2.5f);
  const int32_t step = 12345;
  const std::string path = file("model.safetensors");
  const std::map<std::string, std::string> meta = {{"format", "tandem"}, {"step", "12"}};
  write_safetensors(path,
                    {{"z.weight", DType::F32, {2, 3, 4}, w.data()},
                     {"a.bias", DType::BF16, {5}, h.data()},
                     {"m.half", DType::F16, {7, 1}, f.data()},
                     {"step", DType::I32, {}, &step},
                     {"empty", DType::F32, {0, 3}, nullptr}},
                    meta);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const SafetensorsFile st(path);
  EXPECT_EQ(st.names(), (std::vector<std::string>{"a.bias", "empty", "m.half", "step", "z.weight"}));
  EXPECT_EQ(st.metadata(), meta);
  EXPECT_TRUE(st.contains("z.weight"));
  EXPECT_FALSE(st.contains("nope"));
  EXPECT_EQ(st.dtype("z.weight"), DType::F32);
  EXPECT_EQ(st.shape("z.weight"), (Shape{2, 3, 4}));
  ASSERT_EQ(st.nbytes("z.weight"), w.size() * 4);
  EXPECT_EQ(std::memcmp(st.data("z.weight"), w.data(), w.size() * 4), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(st.data("z.weight")) % 4, 0u) << "data should be aligned";
  EXPECT_EQ(st.dtype("a.bias"), DType::BF16);
  EXPECT_EQ(std::memcmp(st.data("a.bias"), h.data(), h.size() * 2), 0);
  EXPECT_EQ(st.dtype("m.half"), DType::F16);
  EXPECT_EQ(st.shape("m.half"), (Shape{7, 1}));
  EXPECT_EQ(std::memcmp(st.data("m.half"), f.data(), f.size() * 2), 0);
  EXPECT_EQ(st.shape("step"), Shape{});
  EXPECT_EQ(*static_cast<const int32_t*>(st.data("step")), 12345);
  EXPECT_EQ(st.nbytes("empty"), 0u);
  EXPECT_HAS(error_of([&] { st.shape("nope"); }), "safetensors file '" + path + "': no tensor named 'nope'");

  // The header must be what other readers expect: sorted keys, upper-case dtypes, 8-byte aligned data.
  const std::string bytes = read(path);
  uint64_t n = 0;
  for (int b = 0; b < 8; ++b) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[b])) << (8 * b);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_LT(header.find("\"a.bias\""), header.find("\"z.weight\""));
  EXPECT_HAS(header, "\"dtype\":\"BF16\"");

  // Rewriting replaces the file atomically and leaves no temporary behind.
  write_safetensors(path, {{"only", DType::I32, {1}, &step}}, {});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const SafetensorsFile again(path);
  EXPECT_EQ(again.names(), std::vector<std::string>{"only"});
  EXPECT_TRUE(again.metadata().empty());
}

TEST_F(Safetensors, WriterRejectsDuplicatesAndMissingDirectories) {
  const float x = 1;
  EXPECT_HAS(error_of([&] {
               write_safetensors(file("d.safetensors"), {{"a", DType::F32, {1}, &x}, {"a", DType::F32, {1}, &x}}, {});
             }),
             "two tensors are named 'a'");
  EXPECT_HAS(error_of([&] {
               write_safetensors(file("u.safetensors"), {{"bad\xff", DType::F32, {1}, &x}}, {});
             }),
             "not valid UTF-8");
  EXPECT_FALSE(std::filesystem::exists(file("u.safetensors.tmp")));
  const std::string nowhere = file("no/such/dir/x.safetensors");
  EXPECT_HAS(error_of([&] { write_safetensors(nowhere, {{"a", DType::F32, {1}, &x}}, {}); }), "cannot create '");
}

TEST_F(Safetensors, CorruptionsAreErrorsNamingTheFile) {
  std::vector<float> w(16, 2.0f);
  const std::string good = file("good.safetensors");
  write_safetensors(good, {{"w", DType::F32, {4, 4}, w.data()}, {"b", DType::F32, {4}, w.data()}}, {{"k", "v"}});
  const std::string bytes = read(good);
  const auto expect_error = [&](const std::string& path, const std::string& part) {
    const std::string msg = error_of([&] { SafetensorsFile f(path); });
    EXPECT_HAS(msg, "safetensors file '" + path + "'");
    EXPECT_HAS(msg, part);
  };

  const std::string p = file("bad.safetensors");
  write(p, bytes.substr(0, 5));
  expect_error(p, "too short for the 8-byte header length");
  write(p, "");
  expect_error(p, "only 0 bytes");
  write(p, bytes.substr(0, bytes.size() - 4));
  expect_error(p, "beyond the");
  write(p, bytes + "junk");
  expect_error(p, "trailing bytes");

  std::string long_len = bytes;
  long_len[5] = 1;  // the length field now claims terabytes
  write(p, long_len);
  expect_error(p, "the header length field says");

  expect_error(raw_file("garbage.safetensors", "{\"w\": nonsense"), "header is not valid JSON");
  expect_error(raw_file("array.safetensors", "[1, 2]"), "header is not a JSON object");
  expect_error(raw_file("nodtype.safetensors", R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", "abcd"),
               "tensor 'w' has no 'dtype'");
  expect_error(raw_file("i64.safetensors", R"({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})",
                        std::string(8, '\0')),
               "tensor 'w' has dtype I64, which Tandem cannot load");
  expect_error(raw_file("f31.safetensors", R"({"w": {"dtype": "F31", "shape": [1], "data_offsets": [0, 4]}})", "abcd"),
               "unknown dtype F31");
  expect_error(
      raw_file("range.safetensors", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "abcd"),
      "data_offsets [0,8] beyond the 4-byte data section");
  expect_error(raw_file("size.safetensors", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "abcd"),
               "spans 4 bytes but its shape (2) of F32 needs 8");
  expect_error(raw_file("overlap.safetensors",
                        R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                        std::string(8, '\0')),
               "overlaps the one before");
  expect_error(raw_file("gap.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                        std::string(8, '\0')),
               "bytes [0, 4) of the data section belong to no tensor");
  expect_error(raw_file("meta.safetensors", R"({"__metadata__": {"k": 3}})"), "__metadata__ value of 'k'");
  expect_error(file("missing.safetensors"), "cannot open it");
}

TEST_F(Safetensors, AtomicFileAndCrc) {
  const std::string p = file("state.json");
  write_file_atomic(p, "first");
  write_file_atomic(p, "second version");
  EXPECT_EQ(read(p), "second version");
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));

  std::string big(3 << 20, '\0');  // larger than one read chunk
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  write_file_atomic(p, big);
  const uLong want =
      ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(big.data()), static_cast<uInt>(big.size()));
  EXPECT_EQ(crc32_file(p), static_cast<uint32_t>(want));
  write_file_atomic(p, "123456789");
  EXPECT_EQ(crc32_file(p), 0xCBF43926u) << "the standard CRC-32 check value";
  EXPECT_HAS(error_of([&] { crc32_file(file("absent")); }), "cannot open '");

  {  // A writer abandoned before commit leaves neither the temporary nor a new file.
    AtomicFileWriter w(file("abandoned"));
    w.write("x", 1);
  }
  EXPECT_FALSE(std::filesystem::exists(file("abandoned")));
  EXPECT_FALSE(std::filesystem::exists(file("abandoned.tmp")));
}

}  // namespace
}  // namespace tandem::checkpoint
