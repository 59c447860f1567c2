// Tests of tandem_data: sampler determinism, batch layouts of each dataset, and the file error messages.
// How batches are split over ranks is the trainer's business and is tested there.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "tandem/core/error.h"
#include "tandem/core/ignore_target.h"
#include "tandem/data/dataset.h"
#include "tandem/data/sampler.h"
#include "tandem/device/cpu_device.h"
#include "test_util.h"

namespace tandem::data {
namespace {

using tandem::testing::error_of;

class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() / ("tandem_data_test_" + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  template <class T>
  std::string write_tokens(const std::string& name, const std::vector<T>& ids) const {
    std::string bytes;
    for (T id : ids)
      for (size_t b = 0; b < sizeof(T); ++b) bytes += static_cast<char>((static_cast<uint64_t>(id) >> (8 * b)) & 0xff);
    return write(name, bytes);
  }

  std::filesystem::path dir_;
  device::CpuDevice cpu_;
};

spec::DataConfig synthetic_data(int64_t samples = 65536) {
  spec::DataConfig d;
  d.samples = samples;
  return d;
}
spec::DataConfig text_data(const std::string& path) {
  spec::DataConfig d;
  d.type = spec::DataType::Text;
  d.path = path;
  return d;
}
spec::DataConfig token_data(const std::string& path, int token_bytes = 2) {
  spec::DataConfig d;
  d.type = spec::DataType::Tokens;
  d.path = path;
  d.token_bytes = token_bytes;
  return d;
}

spec::ModelIO gpt_io(int64_t seq_len, int64_t vocab) { return {true, seq_len, vocab, 0, 0}; }
spec::ModelIO mlp_io(int64_t features, int64_t classes) { return {false, 0, 0, features, classes}; }

// Rows [first, first + count) of `whole` must equal `part`, bit for bit.
void expect_rows_equal(const Tensor& whole, const Tensor& part, int64_t first) {
  const Tensor rows = whole.rows(first, part.dim(0));
  ASSERT_EQ(rows.shape(), part.shape());
  EXPECT_EQ(std::memcmp(rows.raw(), part.raw(), part.nbytes()), 0);
}

TEST(Sampler, DeterministicAndInRange) {
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 200; ++i) {
    const int64_t s = sample_index(7, 3, i, 50);
    EXPECT_EQ(s, sample_index(7, 3, i, 50));
    EXPECT_GE(s, 0);
    EXPECT_LT(s, 50);
    seen.insert(s);
  }
  EXPECT_GT(seen.size(), 30u) << "draws should spread over the samples";
  int differ_step = 0, differ_seed = 0, differ_purpose = 0;
  for (int64_t i = 0; i < 64; ++i) {
    differ_step += sample_index(7, 3, i, 1000000) != sample_index(7, 4, i, 1000000);
    differ_seed += sample_index(7, 3, i, 1000000) != sample_index(8, 3, i, 1000000);
    differ_purpose += sample_index(7, 3, i, 1000000) != window_start(7, 3, i, 1000000);
  }
  EXPECT_GT(differ_step, 60);
  EXPECT_GT(differ_seed, 60);
  EXPECT_GT(differ_purpose, 60);
}

TEST_F(DataFiles, SyntheticClassesDeterministicAndSliceable) {
  const auto ds = make_dataset(synthetic_data(1000), mlp_io(6, 4), 42);
  const Batch whole = ds->batch(5, 0, 8, cpu_);
  ASSERT_EQ(whole.inputs.shape(), (Shape{8, 6}));
  ASSERT_EQ(whole.targets.shape(), (Shape{8}));
  EXPECT_EQ(whole.inputs.dtype(), DType::F32);
  EXPECT_EQ(whole.targets.dtype(), DType::I32);
  const Batch part = ds->batch(5, 2, 3, cpu_);
  expect_rows_equal(whole.inputs, part.inputs, 2);
  expect_rows_equal(whole.targets, part.targets, 2);

  const auto again = make_dataset(synthetic_data(1000), mlp_io(6, 4), 42);
  const Batch same = again->batch(5, 0, 8, cpu_);
  expect_rows_equal(whole.inputs, same.inputs, 0);
  expect_rows_equal(whole.targets, same.targets, 0);

  const Batch big = ds->batch(0, 0, 512, cpu_);
  std::set<int32_t> labels;
  for (int64_t i = 0; i < 512; ++i) {
    const int32_t y = big.targets.i32()[i];
    EXPECT_GE(y, 0);
    EXPECT_LT(y, 4);
    labels.insert(y);
  }
  EXPECT_EQ(labels.size(), 4u) << "labels should not all be equal";
  EXPECT_EQ(ds->describe(),
            "synthetic classification: 1,000 samples, 6 features, 4 classes (fixed random linear teacher)");
}

TEST_F(DataFiles, SyntheticTokensFollowTheirRule) {
  const auto ds = make_dataset(synthetic_data(), gpt_io(8, 50), 3);
  const Batch whole = ds->batch(1, 0, 6, cpu_);
  ASSERT_EQ(whole.inputs.shape(), (Shape{6, 8}));
  ASSERT_EQ(whole.targets.shape(), (Shape{48}));
  const Batch part = ds->batch(1, 4, 2, cpu_);
  expect_rows_equal(whole.inputs, part.inputs, 4);
  expect_rows_equal(whole.targets.view({6, 8}), part.targets.view({2, 8}), 4);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t k = 0; k + 1 < 8; ++k) EXPECT_EQ(whole.targets.i32()[r * 8 + k], whole.inputs.i32()[r * 8 + k + 1]);
}

TEST_F(DataFiles, TextTargetsAreInputsShifted) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>(i % 251);
  const std::string path = write("a.txt", text);
  const auto ds = make_dataset(text_data(path), gpt_io(16, 256), 9);
  const Batch whole = ds->batch(2, 0, 8, cpu_);
  ASSERT_EQ(whole.inputs.shape(), (Shape{8, 16}));
  ASSERT_EQ(whole.targets.shape(), (Shape{128}));
  for (int64_t r = 0; r < 8; ++r) {
    const int32_t* in = whole.inputs.i32() + r * 16;
    const int32_t* out = whole.targets.i32() + r * 16;
    // The file counts up mod 251, so a contiguous window counts up too.
    for (int64_t k = 0; k < 15; ++k) EXPECT_EQ(in[k + 1], (in[k] + 1) % 251);
    for (int64_t k = 0; k < 15; ++k) EXPECT_EQ(out[k], in[k + 1]);
    EXPECT_EQ(out[15], (in[15] + 1) % 251);
  }
  const Batch part = ds->batch(2, 2, 3, cpu_);
  expect_rows_equal(whole.inputs, part.inputs, 2);
  expect_rows_equal(whole.targets.view({8, 16}), part.targets.view({3, 16}), 2);
  EXPECT_EQ(ds->describe(), "text '" + path + "': 300 B, 300 bytes, vocab 256");
}

TEST_F(DataFiles, TokenFilesUint16AndUint32) {
  std::vector<uint16_t> ids16;
  std::vector<uint32_t> ids32;
  for (uint32_t i = 0; i < 100; ++i) {
    ids16.push_back(static_cast<uint16_t>(1000 + i * 7));  // ids above 255 catch a wrong element size
    ids32.push_back(70000 + i * 3);                        // ids above 65535 catch a uint16 read
  }
  const std::string p16 = write_tokens("t16.bin", ids16);
  const std::string p32 = write_tokens("t32.bin", ids32);
  const auto d16 = make_dataset(token_data(p16), gpt_io(10, 2000), 1);
  const auto d32 = make_dataset(token_data(p32, 4), gpt_io(10, 80000), 1);
  const Batch b16 = d16->batch(0, 0, 4, cpu_);
  const Batch b32 = d32->batch(0, 0, 4, cpu_);
  for (int64_t r = 0; r < 4; ++r) {
    const int32_t first16 = b16.inputs.i32()[r * 10], first32 = b32.inputs.i32()[r * 10];
    ASSERT_EQ((first16 - 1000) % 7, 0);
    ASSERT_EQ((first32 - 70000) % 3, 0);
    for (int64_t k = 0; k < 10; ++k) {
      EXPECT_EQ(b16.inputs.i32()[r * 10 + k], first16 + 7 * k);
      EXPECT_EQ(b16.targets.i32()[r * 10 + k], first16 + 7 * (k + 1));
      EXPECT_EQ(b32.inputs.i32()[r * 10 + k], first32 + 3 * k);
      EXPECT_EQ(b32.targets.i32()[r * 10 + k], first32 + 3 * (k + 1));
    }
  }
  EXPECT_EQ(d16->describe(), "tokens '" + p16 + "': 200 B, 100 uint16 tokens, vocab 2,000");
}

TEST_F(DataFiles, FileErrors) {
  const std::string missing = (dir_ / "missing.txt").string();
  EXPECT_HAS(error_of([&] { make_dataset(text_data(missing), gpt_io(4, 256), 1); }),
             "text file '" + missing + "' cannot be opened");

  const std::string empty = write("empty.bin", "");
  EXPECT_HAS(error_of([&] { make_dataset(token_data(empty), gpt_io(4, 256), 1); }),
             "token file '" + empty + "' is empty");

  const std::string short_text = write("short.txt", "abcd");
  EXPECT_HAS(error_of([&] { make_dataset(text_data(short_text), gpt_io(4, 256), 1); }),
             "text file '" + short_text + "' holds 4 tokens (4 bytes), fewer than seq_len + 1 = 5");

  const std::string odd = write("odd.bin", "abcde");
  EXPECT_HAS(error_of([&] { make_dataset(token_data(odd), gpt_io(1, 256), 1); }),
             "token file '" + odd + "' has 5 bytes, not a multiple of 2 (data.dtype uint16)");
  const std::string six = write("six.bin", "abcdef");
  EXPECT_HAS(error_of([&] { make_dataset(token_data(six, 4), gpt_io(1, 256), 1); }),
             "not a multiple of 4 (data.dtype uint32)");

  std::vector<uint16_t> ids(20, 5);
  ids[7] = 300;
  const std::string bad = write_tokens("bad.bin", ids);
  const auto ds = make_dataset(token_data(bad), gpt_io(19, 256), 1);  // one window
  EXPECT_HAS(error_of([&] { ds->batch(0, 0, 1, cpu_); }),
             "token file '" + bad + "': token id 300 at index 7 (byte offset 14) is >= model.vocab_size 256");

  const std::string text = write("ok.txt", std::string(64, 'x'));
  EXPECT_HAS(error_of([&] { make_dataset(text_data(text), gpt_io(4, 100), 1); }),
             "model.vocab_size is 100: set model.vocab_size to at least 256");
  EXPECT_HAS(error_of([&] { make_dataset(text_data(text), mlp_io(4, 2), 1); }),
             "yields token sequences, but the model takes feature vectors");
}

// llm.c's token files: the header gives the width (magic 20240520 version 1: uint16; 20240801 version 7: uint32)
// and the count; windows read the tokens after it; a wrong version or a count that does not match the size is
// refused.
TEST_F(DataFiles, LlmcTokenFiles) {
  auto header = [](int32_t magic, int32_t version, int32_t count) {
    std::vector<int32_t> h(256, 0);
    h[0] = magic;
    h[1] = version;
    h[2] = count;
    std::string bytes;
    for (int32_t v : h)
      for (int b = 0; b < 4; ++b) bytes += static_cast<char>((static_cast<uint32_t>(v) >> (8 * b)) & 0xff);
    return bytes;
  };
  std::vector<uint16_t> ids16(100);
  std::vector<uint32_t> ids32(100);
  for (size_t i = 0; i < ids16.size(); ++i) {
    ids16[i] = static_cast<uint16_t>(i * 7 % 1000);
    ids32[i] = static_cast<uint32_t>(70000 + i);
  }
  const std::string raw16 = write_tokens("raw16.bin", ids16), raw32 = write_tokens("raw32.bin", ids32);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string f16 = write("gpt2.bin", header(20240520, 1, 100) + slurp(raw16));
  const std::string f32 = write("llama3.bin", header(20240801, 7, 100) + slurp(raw32));
  // data.dtype is left at its uint16 default for the Llama 3 file: the header says uint32.
  const auto d16 = make_dataset(token_data(f16), gpt_io(99, 1000), 1);
  const auto d32 = make_dataset(token_data(f32), gpt_io(99, 80000), 1);
  EXPECT_EQ(d16->describe(), "tokens '" + f16 + "': 1.2 KiB, 100 uint16 tokens (llm.c format), vocab 1,000");
  EXPECT_EQ(d32->describe(), "tokens '" + f32 + "': 1.4 KiB, 100 uint32 tokens (llm.c format), vocab 80,000");
  // One window of seq_len + 1 = 100 tokens: the whole file after the header.
  const Batch b16 = d16->batch(0, 0, 1, cpu_), b32 = d32->batch(0, 0, 1, cpu_);
  for (int64_t k = 0; k < 99; ++k) {
    EXPECT_EQ(b16.inputs.i32()[k], static_cast<int32_t>(ids16[static_cast<size_t>(k)]));
    EXPECT_EQ(b16.targets.i32()[k], static_cast<int32_t>(ids16[static_cast<size_t>(k + 1)]));
    EXPECT_EQ(b32.inputs.i32()[k], static_cast<int32_t>(ids32[static_cast<size_t>(k)]));
  }
  EXPECT_EQ(d32->first_invalid(0, 1), -1);
  EXPECT_EQ(d32->scanned_bytes(), 400u);

  const std::string bad_version = write("v2.bin", header(20240520, 2, 100) + slurp(raw16));
  EXPECT_HAS(error_of([&] { make_dataset(token_data(bad_version), gpt_io(8, 1000), 1); }),
             "has llm.c's magic 20240520 but version 2, not the version 1 this magic comes with");
  const std::string truncated = write("short.bin", header(20240520, 1, 120) + slurp(raw16));
  EXPECT_HAS(error_of([&] { make_dataset(token_data(truncated), gpt_io(8, 1000), 1); }),
             "(llm.c format) says it holds 120 tokens (1,264 bytes with its header) but has 1,224 bytes");
}

// The one scan before training: each part finds only its own first bad id, across block boundaries, for uint16
// and uint32 files; text files with a full byte vocabulary need no scan.
TEST_F(DataFiles, FirstInvalidTokenByPart) {
  const int64_t n = (int64_t{3} << 20) + 12345;  // more than three 1 Mi-token blocks
  std::vector<uint16_t> ids16(static_cast<size_t>(n), 9);
  std::vector<uint32_t> ids32(static_cast<size_t>(n), 9);
  // Parts of 3 are [0, 1052690), [1052690, 2105381), [2105381, n): one bad id in each, the first at a block start.
  for (int64_t bad : {int64_t{1} << 20, int64_t{1600003}, n - 1}) {
    ids16[static_cast<size_t>(bad)] = 1000;
    ids32[static_cast<size_t>(bad)] = 70000;
  }
  const auto d16 = make_dataset(token_data(write_tokens("p16.bin", ids16)), gpt_io(8, 1000), 1);
  const auto d32 = make_dataset(token_data(write_tokens("p32.bin", ids32), 4), gpt_io(8, 70000), 1);
  for (const auto* d : {d16.get(), d32.get()}) {
    EXPECT_EQ(d->first_invalid(0, 1), int64_t{1} << 20);
    EXPECT_EQ(d->first_invalid(0, 3), int64_t{1} << 20);  // part 0 of 3: [0, n/3)
    EXPECT_EQ(d->first_invalid(1, 3), 1600003);
    EXPECT_EQ(d->first_invalid(2, 3), n - 1);
    EXPECT_EQ(d->scanned_bytes(), static_cast<uint64_t>(n) * (d == d16.get() ? 2 : 4));
  }
  EXPECT_HAS(d16->describe_invalid(n - 1), "token id 1000 at index 3,158,072");

  std::vector<uint16_t> fine(4096, 999);
  const auto ok = make_dataset(token_data(write_tokens("fine.bin", fine)), gpt_io(8, 1000), 1);
  EXPECT_EQ(ok->first_invalid(0, 1), -1);
  const auto text = make_dataset(text_data(write("t.txt", std::string(64, 'x'))), gpt_io(8, 256), 1);
  EXPECT_EQ(text->scanned_bytes(), 0u);
}

// A loss mask beside a token file: byte i says whether token i counts as a target. Targets that do not count are
// kIgnoreTarget, the step's counted targets are known before the step, bad masks are refused with what to do.
TEST_F(DataFiles, LossMaskBesideATokenFile) {
  auto header = [](int32_t magic, int32_t version, int32_t count) {
    std::string bytes;
    for (int i = 0; i < 256; ++i) {
      const int32_t v = i == 0 ? magic : i == 1 ? version : i == 2 ? count : 0;
      for (int b = 0; b < 4; ++b) bytes += static_cast<char>((static_cast<uint32_t>(v) >> (8 * b)) & 0xff);
    }
    return bytes;
  };
  std::vector<uint16_t> ids(40);
  std::string mask;
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<uint16_t>(i + 1);
    mask += static_cast<char>(i % 3 == 0 ? 1 : 0);  // tokens 0, 3, 6, ... count
  }
  const std::string path = write_tokens("inst.bin", ids);
  write("inst.mask.bin", header(20240522, 1, 40) + mask);
  const auto d = make_dataset(token_data(path), gpt_io(8, 100), 3);
  EXPECT_HAS(d->describe(), "loss mask '" + (dir_ / "inst.mask.bin").string() + "': 14 of its tokens count as targets");
  const Batch b = d->batch(2, 0, 5, cpu_);
  int64_t counted = 0;
  for (int64_t r = 0; r < 5; ++r) {
    const int32_t first = b.inputs.i32()[r * 8];  // token id i + 1 at index i: the window starts at index first - 1
    for (int64_t k = 0; k < 8; ++k) {
      const int64_t target_index = first - 1 + k + 1;
      const int32_t want = target_index % 3 == 0 ? static_cast<int32_t>(target_index + 1) : kIgnoreTarget;
      EXPECT_EQ(b.targets.i32()[r * 8 + k], want) << r << ", " << k;
      counted += want != kIgnoreTarget;
      EXPECT_EQ(b.inputs.i32()[r * 8 + k], first + k);  // inputs are never masked
    }
  }
  EXPECT_EQ(d->counted_targets(2, 0, 5), std::optional<int64_t>(counted));
  EXPECT_EQ(d->scanned_bytes(), 40u * 2 + 40u);
  EXPECT_EQ(d->first_invalid(0, 1), -1);
  // Without a mask every target counts: nullopt.
  EXPECT_EQ(make_dataset(token_data(write_tokens("plain.bin", ids)), gpt_io(8, 100), 3)->counted_targets(0, 0, 5),
            std::nullopt);

  // A byte other than 0 or 1 is found by the scan and named.
  std::string bad = mask;
  bad[17] = 2;
  write("inst.mask.bin", header(20240522, 1, 40) + bad);
  const auto b2 = make_dataset(token_data(path), gpt_io(8, 100), 3);
  EXPECT_EQ(b2->first_invalid(0, 1), 40 + 17);
  EXPECT_HAS(b2->describe_invalid(40 + 17), "byte 2 at token 17 (byte offset 1,041) is neither 0 nor 1");
  // Another file's mask, or not a mask at all, is refused before anything trains.
  write("inst.mask.bin", header(20240522, 1, 39) + mask.substr(0, 39));
  EXPECT_HAS(error_of([&] { make_dataset(token_data(path), gpt_io(8, 100), 3); }), "the two files are not a pair");
  write("inst.mask.bin", header(20240520, 1, 40) + mask);
  EXPECT_HAS(error_of([&] { make_dataset(token_data(path), gpt_io(8, 100), 3); }), "magic 20240522, version 1");
}

}  // namespace
}  // namespace tandem::data
