// sum_squares against a float64 sum in every float dtype, bit-identical across thread counts, inf and NaN kept;
// sum_squares_total as the host loop over sum_squares, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops_test_util.h"
#include "tandem/ops/op_util.h"
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
  Tensor x = randn(dev, {9, 30011}, 5);
  ASSERT_TRUE(worth_parallel(x.numel()));  // large enough for the parallel path
  omp_set_num_threads(1);
  const double one = sum_squares(x);
  omp_set_num_threads(2);
  const double two = sum_squares(x);
  EXPECT_EQ(one, two);
}

class OpsSumSquaresDtypes : public ::testing::TestWithParam<DType> {};

TEST_P(OpsSumSquaresDtypes, MatchesDoubleAndIsBitIdenticalAcrossThreadCounts) {
  device::CpuDevice dev;
  testing::ThreadCountGuard guard;
  for (int64_t n : {1, 13, 65, 270001}) {
    Tensor x = testing::randn_as(dev, {n}, static_cast<uint64_t>(n), GetParam());
    double want = 0;
    for (double v : testing::values(x)) want += v * v;  // the stored values, squared exactly in double
    omp_set_num_threads(1);
    const double one = sum_squares(x);
    omp_set_num_threads(2);
    EXPECT_NEAR(one, want, 1e-12 * want) << n;
    EXPECT_EQ(sum_squares(x), one) << n;
  }
}

// The fp16 loss-scale check reads overflow from the norm: inf and NaN must come through.
TEST_P(OpsSumSquaresDtypes, InfAndNanPropagate) {
  device::CpuDevice dev;
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(sum_squares(testing::from_double_as(dev, {3}, {1.0, -inf, 2.0}, GetParam())), inf);
  EXPECT_TRUE(std::isnan(sum_squares(testing::from_double_as(dev, {3}, {1.0, std::nan(""), 2.0}, GetParam()))));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsSumSquaresDtypes, ::testing::ValuesIn(testing::compute_dtypes()),
                         testing::dtype_label);

TEST(OpsSumSquares, IntegerTensorThrows) {
  device::CpuDevice dev;
  EXPECT_THROW(sum_squares(Tensor::zeros({4}, DType::I32, dev, "i32")), Error);
}

// The global gradient norm's sum: the same double as adding each tensor's sum_squares in list order, whatever the
// sizes and dtypes (an empty tensor adds 0), and near the float64 sum of every stored value.
TEST(OpsSumSquaresTotal, IsTheHostLoopBitForBit) {
  device::CpuDevice dev;
  std::vector<Tensor> xs;
  int64_t seed = 40;
  for (int64_t n : {1000, 1, 0, 270001, 13, 65}) {
    for (DType t : testing::compute_dtypes()) xs.push_back(testing::randn_as(dev, {n}, ++seed, t, 0.01f * n + 1));
  }
  double loop = 0, want = 0;
  for (const Tensor& x : xs) {
    loop += sum_squares(x);
    for (double v : testing::values(x)) want += v * v;
  }
  const double total = sum_squares_total(xs);
  EXPECT_EQ(total, loop);
  EXPECT_NEAR(total, want, 1e-12 * want);
  EXPECT_EQ(sum_squares_total({}), 0.0);
  EXPECT_EQ(sum_squares_total({xs[0]}), sum_squares(xs[0]));
}

TEST(OpsSumSquaresTotal, InfAndNanPropagate) {
  device::CpuDevice dev;
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor fine = randn(dev, {100}, 1);
  EXPECT_EQ(sum_squares_total({fine, testing::from_double(dev, {2}, {1.0, inf}), fine}), inf);
  EXPECT_TRUE(std::isnan(sum_squares_total({fine, testing::from_double(dev, {1}, {std::nan("")})})));
}

TEST(OpsSumSquaresTotal, RefusesMixedDevicesUndefinedAndIntegerTensors) {
  device::CpuDevice dev, other;
  const Tensor x = randn(dev, {4}, 1);
  EXPECT_HAS(testing::error_of([&] { sum_squares_total({x, randn(other, {4}, 2)}); }), "one device");
  EXPECT_HAS(testing::error_of([&] { sum_squares_total({x, Tensor()}); }), "tensor 1 of 2 is undefined");
  EXPECT_HAS(testing::error_of([&] { sum_squares_total({x, Tensor::zeros({4}, DType::I32, dev, "i32")}); }), "i32");
}

}  // namespace
}  // namespace tandem::ops
