// Writes the binary seed inputs for the safetensors and tokens fuzzers into the folders given, at run time,
// so no binary seeds are committed. The safetensors seeds come from the project's own writer, so they are
// exactly what Tandem writes. Usage: seed_writer <safetensors-dir> <tokens-dir>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tandem/checkpoint/safetensors.h"
#include "tandem/core/error.h"

namespace {

using tandem::DType;
using tandem::checkpoint::TensorEntry;

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) TANDEM_FAIL("cannot write seed '", path, "'");
}

void write_safetensors_seeds(const std::string& dir) {
  const std::vector<float> f32 = {1.0f, -2.5f, 0.0f, 3.25f, 7.0f, -0.5f};
  const std::vector<uint16_t> half = {0x3f80, 0xc000, 0x0000, 0x7f80};
  const std::vector<int32_t> i32 = {1, -1, 1 << 30};
  // One tensor of each dtype Tandem loads, a scalar, an empty tensor and metadata: the reader's branches.
  tandem::checkpoint::write_safetensors(dir + "/all_dtypes.safetensors",
                                        {{"w", DType::F32, {2, 3}, f32.data()},
                                         {"b", DType::BF16, {4}, half.data()},
                                         {"h", DType::F16, {2, 2}, half.data()},
                                         {"step", DType::I32, {3}, i32.data()},
                                         {"scalar", DType::F32, {}, f32.data()},
                                         {"empty", DType::F32, {0, 5}, nullptr}},
                                        {{"format", "pt"}, {"tandem", "seed"}});
  tandem::checkpoint::write_safetensors(dir + "/one.safetensors", {{"x", DType::F32, {1}, f32.data()}}, {});
  tandem::checkpoint::write_safetensors(dir + "/no_tensors.safetensors", {}, {{"only", "metadata"}});
}

void write_token_seeds(const std::string& dir) {
  // The first byte picks the dtype (even: uint16, odd: uint32); ids stay below the fuzzer's vocab of 1000.
  std::vector<uint8_t> u16 = {0}, u32 = {1};
  for (uint32_t i = 0; i < 40; ++i) {
    const uint32_t id = (i * 37) % 1000;
    u16.push_back(static_cast<uint8_t>(id));
    u16.push_back(static_cast<uint8_t>(id >> 8));
    for (int b = 0; b < 4; ++b) u32.push_back(static_cast<uint8_t>(id >> (8 * b)));
  }
  write_bytes(dir + "/u16.tokens", u16);
  write_bytes(dir + "/u32.tokens", u32);
  // Exactly one window (seq_len + 1 = 9 tokens), the shortest file that yields batches.
  write_bytes(dir + "/u16_one_window.tokens", std::vector<uint8_t>(u16.begin(), u16.begin() + 1 + 9 * 2));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <safetensors-dir> <tokens-dir>\n", argv[0]);
    return 2;
  }
  try {
    write_safetensors_seeds(argv[1]);
    write_token_seeds(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seed_writer: %s\n", e.what());
    return 1;
  }
  return 0;
}
