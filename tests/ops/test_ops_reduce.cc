// sum_squares against a float64 sum, and bit-identical across thread counts.
#include <gtest/gtest.h>

#include "ops_test_util.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::randn;

double reference(const Tensor& x) {
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += double(x.f32()[i]) * x.f32()[i];
  return s;
}

TEST(OpsSumSquares, MatchesDoubleAtOddSizes) {
  device::CpuDevice dev;
  for (int64_t n : {1, 7, 13, 64, 65, 1000, 100003}) {
    Tensor x = randn(dev, {n}, static_cast<uint64_t>(n));
    const double want = reference(x);
    EXPECT_NEAR(sum_squares(x), want, 1e-12 * want) << n;
  }
  EXPECT_EQ(sum_squares(Tensor::empty({0}, DType::F32, dev, "empty")), 0.0);
}

TEST(OpsSumSquares, BitIdenticalAcrossThreadCounts) {
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  Tensor x = randn(dev, {7, 30011}, 5);
  omp_set_num_threads(1);
  const double one = sum_squares(x);
  omp_set_num_threads(2);
  const double two = sum_squares(x);
  EXPECT_EQ(one, two);
}

}  // namespace
}  // namespace tandem::ops
