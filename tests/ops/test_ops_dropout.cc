// Counter-based dropout: each element against uniform_at of its logical index, the keep rate, the same mask for any
// split of the rows or columns and any thread count, the op as its own backward, every compute dtype, the refusals.
#include <gtest/gtest.h>

#include <cmath>

#include "ops_test_util.h"
#include "tandem/core/random_fill.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::randn;

constexpr uint64_t kSeed = 21, kStream = 0xabcdef;

TEST(OpsDropout, EachElementFollowsItsLogicalIndex) {
  device::CpuDevice dev;
  const float p = 0.3f;
  const Tensor x = randn(dev, {40, 24}, 1);
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev, "y");
  // Rows 100.. of a logical tensor 50 columns wide, at column 7.
  dropout(x, y, p, kSeed, kStream, 100, 50, 7);
  int64_t kept = 0;
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t j = 0; j < 24; ++j) {
      const uint64_t index = static_cast<uint64_t>((100 + i) * 50 + 7 + j);
      const bool keep = uniform_at(kSeed, kStream, index) > p;
      const float want = keep ? x.f32()[i * 24 + j] / (1.0f - p) : 0.0f;
      ASSERT_FLOAT_EQ(y.f32()[i * 24 + j], want) << i << ", " << j;
      kept += keep;
    }
  // 960 draws kept with probability 0.7: within 4 standard deviations (14.2).
  EXPECT_NEAR(static_cast<double>(kept), 0.7 * 960, 57);
}

TEST(OpsDropout, TheSameMaskForAnySplitOfRowsOrColumnsAndAnyThreadCount) {
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  const Tensor x = randn(dev, {600, 512}, 2);  // large enough for the parallel loop
  Tensor whole = Tensor::empty(x.shape(), DType::F32, dev, "whole");
  omp_set_num_threads(2);
  dropout(x, whole, 0.1f, kSeed, kStream, 0, 512, 0);
  omp_set_num_threads(1);
  Tensor one = Tensor::empty(x.shape(), DType::F32, dev, "one thread");
  dropout(x, one, 0.1f, kSeed, kStream, 0, 512, 0);
  EXPECT_TRUE(testing::bit_equal(whole, one));
  // Rows 200..599 on their own (a later micro-batch).
  Tensor rows = Tensor::empty({400, 512}, DType::F32, dev, "rows");
  dropout(x.rows(200, 400), rows, 0.1f, kSeed, kStream, 200, 512, 0);
  EXPECT_TRUE(testing::bit_equal(rows, whole.rows(200, 400)));
  // Columns 256..511 (a tensor-parallel slot's input slice), as a (600, 256) block.
  Tensor cols = Tensor::empty({600, 256}, DType::F32, dev, "columns");
  Tensor right = Tensor::empty({600, 256}, DType::F32, dev, "right half");
  for (int64_t i = 0; i < 600; ++i)
    for (int64_t j = 0; j < 256; ++j) right.f32()[i * 256 + j] = x.f32()[i * 512 + 256 + j];
  dropout(right, cols, 0.1f, kSeed, kStream, 0, 512, 256);
  for (int64_t i = 0; i < 600; ++i)
    for (int64_t j = 0; j < 256; ++j) ASSERT_EQ(cols.f32()[i * 256 + j], whole.f32()[i * 512 + 256 + j]);
  // Another stream is another mask.
  Tensor other = Tensor::empty(x.shape(), DType::F32, dev, "other");
  dropout(x, other, 0.1f, kSeed, kStream + 1, 0, 512, 0);
  EXPECT_FALSE(testing::bit_equal(other, whole));
}

TEST(OpsDropout, IsItsOwnBackwardAndZeroProbabilityIsTheIdentity) {
  device::CpuDevice dev;
  const Tensor x = randn(dev, {30, 16}, 3), w = randn(dev, {30, 16}, 4);
  // L = sum(w * dropout(x)): dL/dx = dropout(w) with the same keys.
  Tensor dx = Tensor::empty(x.shape(), DType::F32, dev, "dx");
  dropout(w, dx, 0.25f, kSeed, kStream, 5, 16, 0);
  const testing::DoubleFn f = [&](const std::vector<double>& in) {
    std::vector<double> out(in.size());
    for (size_t e = 0; e < in.size(); ++e) {
      const bool keep = uniform_at(kSeed, kStream, 5 * 16 + e) > 0.25f;
      out[e] = keep ? in[e] / 0.75 : 0.0;
    }
    return out;
  };
  const std::vector<double> g = testing::numeric_grad(f, testing::values(x), testing::values(w));
  for (size_t e = 0; e < g.size(); ++e) EXPECT_NEAR(dx.f32()[e], g[e], 1e-5) << e;
  Tensor same = Tensor::empty(x.shape(), DType::F32, dev, "p 0");
  dropout(x, same, 0.0f, kSeed, kStream, 0, 16, 0);
  EXPECT_TRUE(testing::bit_equal(same, x));
}

class OpsDropoutDtypes : public ::testing::TestWithParam<DType> {};

TEST_P(OpsDropoutDtypes, KeepsTheF32MaskAndRoundsOnce) {
  device::CpuDevice dev;
  const Tensor x = testing::randn_as(dev, {17, 9}, 6, GetParam());
  Tensor y = Tensor::empty(x.shape(), GetParam(), dev, "y");
  dropout(x, y, 0.5f, kSeed, kStream, 3, 9, 0);
  const std::vector<double> in = testing::values(x), out = testing::values(y);
  for (size_t e = 0; e < in.size(); ++e) {
    const bool keep = uniform_at(kSeed, kStream, 3 * 9 + e) > 0.5f;
    EXPECT_NEAR(out[e], keep ? 2 * in[e] : 0.0, testing::tolerance(GetParam(), 1e-7) * std::fabs(2 * in[e])) << e;
  }
  // In place.
  dropout(x, x, 0.5f, kSeed, kStream, 3, 9, 0);
  EXPECT_TRUE(testing::bit_equal(x, y));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsDropoutDtypes, ::testing::ValuesIn(testing::compute_dtypes()),
                         testing::dtype_label);

TEST(OpsDropout, RefusesABadProbabilityOrColumnsPastTheWidth) {
  device::CpuDevice dev;
  const Tensor x = randn(dev, {4, 8}, 7);
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev, "y");
  EXPECT_THROW(dropout(x, y, 1.0f, kSeed, kStream, 0, 8, 0), Error);
  EXPECT_THROW(dropout(x, y, -0.1f, kSeed, kStream, 0, 8, 0), Error);
  EXPECT_THROW(dropout(x, y, 0.1f, kSeed, kStream, 0, 12, 5), Error);
}

}  // namespace
}  // namespace tandem::ops
