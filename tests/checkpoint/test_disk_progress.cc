// Tests of the free-space check (disk_space.h), the progress lines (progress.h), the CRC of bytes in memory and the
// safetensors layout a writer of one buffer uses.
#include <gtest/gtest.h>
#include <sys/statvfs.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "tandem/checkpoint/atomic_file.h"
#include "tandem/checkpoint/disk_space.h"
#include "tandem/checkpoint/progress.h"
#include "tandem/checkpoint/safetensors.h"
#include "tandem/core/error.h"
#include "test_util.h"

namespace tandem::checkpoint {
namespace {

namespace fs = std::filesystem;
using tandem::testing::error_of;

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("tandem_disk_progress_" + name + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

TEST(DiskSpace, FreeBytesOfAPathAndOfOneNotMadeYet) {
  const fs::path dir = scratch("free");
  struct statvfs st {};
  ASSERT_EQ(::statvfs(dir.c_str(), &st), 0);
  const uint64_t want = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  // Other writers may change the figure between the two calls: allow a few MiB.
  const auto near = [&](uint64_t got) { return got + (64u << 20) >= want && got <= want + (64u << 20); };
  EXPECT_TRUE(near(free_bytes(dir.string())));
  EXPECT_TRUE(near(free_bytes((dir / "run" / "checkpoints").string()))) << "a folder not made yet: its parent's";
  fs::remove_all(dir);
}

TEST(DiskSpace, RefusalNamesBothNumbersAndWhatToDo) {
  const SpaceNeed need{"4 checkpoints of 1.0 GiB", uint64_t{4} << 30, "lower checkpoint.keep"};
  EXPECT_EQ(space_refusal("/x", need, uint64_t{5} << 30), "");
  const std::string r = space_refusal("/x", need, uint64_t{3} << 30);
  EXPECT_HAS(r, "not enough disk space for 4 checkpoints of 1.0 GiB");
  EXPECT_HAS(r, "they need 4.0 GiB (4294967296 bytes) on the file system of '/x'");
  EXPECT_HAS(r, "which has 3.0 GiB (3221225472 bytes) free: lower checkpoint.keep");
  const fs::path dir = scratch("refuse");
  const SpaceNeed too_much{"everything", ~uint64_t{0}, "give up"};
  EXPECT_HAS(error_of([&] { check_free_space(dir.string(), too_much); }), "not enough disk space for everything");
  fs::remove_all(dir);
}

// The lines a Progress says, and the clock it reads: the tests move `now` (seconds) themselves, so what they see
// does not depend on how fast the machine runs them.
struct Lines {
  std::vector<std::string> lines;
  double now = 0;
  ProgressOptions options(double first, double every) {
    ProgressOptions o;
    o.first_after_s = first;
    o.every_s = every;
    o.sink = [this](const std::string& l) { lines.push_back(l); };
    o.clock = [this] { return now; };
    return o;
  }
};

TEST(Progress, QuickWorkSaysNothing) {
  Lines out;
  Progress p("writing x", 1000, true, out.options(3, 5));
  for (int i = 0; i < 10; ++i) {
    out.now = i * 0.3;  // up to 2.7 s: under the 3 s before the first line
    p.add(100);
  }
  p.finish();
  EXPECT_TRUE(out.lines.empty());
  EXPECT_EQ(p.done_bytes(), 1000u);
}

TEST(Progress, LongWorkSaysBytesRateAndEtaThenTheTotal) {
  Lines out;
  Progress p("writing x", 4u << 20, true, out.options(0, 0));
  p.add(1u << 20);
  p.add(3u << 20);
  p.finish();
  ASSERT_EQ(out.lines.size(), 3u);
  EXPECT_HAS(out.lines[0], "writing x: 1.0 MiB of 4.0 MiB (25%), ");
  EXPECT_HAS(out.lines[0], "/s, ETA ");
  EXPECT_HAS(out.lines[1], "4.0 MiB of 4.0 MiB (100%)");
  EXPECT_HAS(out.lines[2], "writing x: 4.0 MiB in ");
}

TEST(Progress, ALineEverySoOftenNotAFlood) {
  Lines out;
  // A line at most every 1/16 s; an add every 1/64 s for 1/4 s: lines at 0, 1/16, 2/16, 3/16 and 4/16 s (exact in
  // binary, so no rounding moves one).
  Progress p("reading y", 0, true, out.options(0, 1.0 / 16));
  for (int i = 0; i <= 16; ++i) {
    out.now = i / 64.0;
    p.add(1);
  }
  EXPECT_EQ(out.lines.size(), 5u);
  EXPECT_HAS(out.lines[0], "reading y: 1 B, ");  // no total: no percentage, no ETA
  Progress quiet("z", 10, false, out.options(0, 0));
  quiet.add(10);
  EXPECT_FALSE(quiet.printed());
}

TEST(Crc, OfBytesInMemoryEqualsTheFileWrittenFromThem) {
  const fs::path dir = scratch("crc");
  std::vector<unsigned char> bytes(3'000'001);
  std::mt19937 rng(3);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  write_file_atomic((dir / "f").string(), std::string(bytes.begin(), bytes.end()));
  const uint32_t whole = crc32_bytes(0, bytes.data(), bytes.size());
  EXPECT_EQ(whole, crc32_file((dir / "f").string()));
  EXPECT_EQ(crc32_bytes(crc32_bytes(0, bytes.data(), 1000), bytes.data() + 1000, bytes.size() - 1000), whole);
  fs::remove_all(dir);
}

TEST(SafetensorsLayout, PrefixAndOneBufferMakeTheSameFileAsTheWriter) {
  const fs::path dir = scratch("layout");
  std::vector<float> a = {1, 2, 3}, b = {4, 5};
  const std::vector<TensorEntry> entries = {{"z", DType::F32, {3}, a.data()}, {"b", DType::F32, {2}, b.data()}};
  write_safetensors((dir / "w.safetensors").string(), entries, {{"k", "v"}});
  const SafetensorsLayout layout = safetensors_layout("x", entries, {{"k", "v"}});
  EXPECT_EQ(layout.offsets.at("b"), 0u);
  EXPECT_EQ(layout.offsets.at("z"), 8u);
  std::string image = layout.prefix;
  image.append(reinterpret_cast<const char*>(b.data()), 8);
  image.append(reinterpret_cast<const char*>(a.data()), 12);
  EXPECT_EQ(layout.file_bytes(), image.size());
  std::ifstream in(dir / "w.safetensors", std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written, image);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::checkpoint
