// FP8 with several scales per tensor on the CPU (ops.h, "FP8"; fp8_scale.h): the grid of blocks and the layout of their
// scales, amax per block, the rounding of each block with its own power of two, fp8_matmul of block-scaled operands
// against a float64 sum, and why the per-row and per-tile recipes exist: rows of very different magnitude keep their
// signal, where one scale for the tensor loses the small ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "ops_test_util.h"
#include "tandem/core/dtype.h"
#include "tandem/ops/ops.h"

namespace tandem {
namespace {

using ops::Fp8Blocks;
using ops::Fp8ScaleGrid;
using testing::randn;

constexpr Fp8Blocks kRowwise{1, 0}, kTile1x128{1, 128}, kTile128x128{128, 128};

// x (R, C) f32 whose row i is scaled by 2^(-(i % 11)) and whose columns past 128 are 8x larger, so rows and tiles
// all have different amaxes.
Tensor uneven(Device& d, int64_t r, int64_t c, uint64_t seed) {
  Tensor x = randn(d, {r, c}, seed);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      x.f32()[i * c + j] *= std::ldexp(1.0f, -static_cast<int>(i % 11)) * (j >= 128 ? 8 : 1);
  return x;
}

Tensor scalar_f32(Device& d) { return Tensor::empty({1}, DType::F32, d, "test scalar"); }

// The output orientation's element (oi, oj) of x (R, C): x itself or its transpose.
float element(const Tensor& x, bool transposed, int64_t oi, int64_t oj) {
  const int64_t c = x.dim(1);
  return x.f32()[transposed ? oj * c + oi : oi * c + oj];
}

TEST(OpsFp8Blocks, GridIsTheLayoutHoppersScaledProductsRead) {
  // One scale: one value.
  Fp8ScaleGrid g = ops::fp8_scale_grid(256, 384, {});
  EXPECT_TRUE(g.single());
  EXPECT_EQ(g.count, 1);
  // Per row (cuBLASLt's outer vector): one value per row, in row order.
  g = ops::fp8_scale_grid(256, 384, kRowwise);
  EXPECT_EQ(g.count, 256);
  EXPECT_EQ(g.at(37, 0), 37);
  // 1 x 128 (cuBLASLt's VEC128): block (r, kb) at kb * R + r; a partial last block along K.
  g = ops::fp8_scale_grid(256, 400, kTile1x128);
  EXPECT_EQ(g.rows, 256);
  EXPECT_EQ(g.cols, 4);
  EXPECT_EQ(g.count, 1024);
  EXPECT_EQ(g.at(5, 3), 3 * 256 + 5);
  // 128 x 128 (cuBLASLt's BLK128x128): block (rb, kb) at rb * round_up(K blocks, 4) + kb.
  g = ops::fp8_scale_grid(300, 400, kTile128x128);
  EXPECT_EQ(g.rows, 3);
  EXPECT_EQ(g.cols, 4);
  EXPECT_EQ(g.at(2, 1), 2 * 4 + 1);
  g = ops::fp8_scale_grid(256, 384, kTile128x128);
  EXPECT_EQ(g.cols, 3);
  EXPECT_EQ(g.count, 2 * 4);
  EXPECT_EQ(g.at(1, 2), 6);
  // K within one tile: a 1 x 128 grid is one value per row, laid out as per row.
  g = ops::fp8_scale_grid(64, 96, kTile1x128);
  EXPECT_EQ(g.count, 64);
  EXPECT_EQ(g.at(9, 0), 9);
}

TEST(OpsFp8Blocks, AmaxIsEachBlocksLargestMagnitude) {
  device::CpuDevice d;
  const int64_t r = 200, c = 272;
  Tensor x = uneven(d, r, c, 3);
  for (const Fp8Blocks blocks : {kRowwise, kTile1x128, kTile128x128})
    for (const bool transposed : {false, true}) {
      const int64_t orow = transposed ? c : r, ocol = transposed ? r : c;
      const Fp8ScaleGrid g = ops::fp8_scale_grid(orow, ocol, blocks);
      std::vector<float> want(static_cast<size_t>(g.count), 0.0f);
      for (int64_t i = 0; i < orow; ++i)
        for (int64_t j = 0; j < ocol; ++j) {
          float& w = want[static_cast<size_t>(g.at(i / g.block_rows, j / g.block_cols))];
          w = std::max(w, std::fabs(element(x, transposed, i, j)));
        }
      Tensor a = Tensor::empty({g.count}, DType::F32, d, "amax");
      for (int64_t k = 0; k < g.count; ++k) a.f32()[k] = 7.0f;  // overwritten, padding included
      ops::amax(x, a, blocks, transposed);
      for (int64_t k = 0; k < g.count; ++k)
        ASSERT_EQ(a.f32()[k], want[static_cast<size_t>(k)])
            << "blocks " << blocks.rows << "x" << blocks.cols << (transposed ? " transposed" : "") << " at " << k;
    }
  // A NaN marks its own block only.
  Tensor y = uneven(d, r, c, 4);
  y.f32()[3 * c + 200] = std::numeric_limits<float>::quiet_NaN();
  const Fp8ScaleGrid g = ops::fp8_scale_grid(r, c, kTile1x128);
  Tensor a = Tensor::empty({g.count}, DType::F32, d, "amax");
  ops::amax(y, a, kTile1x128);
  for (int64_t k = 0; k < g.count; ++k) EXPECT_EQ(std::isnan(a.f32()[k]), k == g.at(3, 1)) << k;
}

TEST(OpsFp8Blocks, QuantizeScalesEachBlockByItsOwnPowerOfTwo) {
  device::CpuDevice d;
  const int64_t r = 144, c = 272;
  Tensor x = uneven(d, r, c, 5);
  for (const DType format : {DType::E4M3, DType::E5M2})
    for (const Fp8Blocks blocks : {kRowwise, kTile1x128, kTile128x128})
      for (const bool transposed : {false, true}) {
        const int64_t orow = transposed ? c : r, ocol = transposed ? r : c;
        const Fp8ScaleGrid g = ops::fp8_scale_grid(orow, ocol, blocks);
        Tensor a = Tensor::empty({g.count}, DType::F32, d, "amax"), inv = Tensor::empty({g.count}, DType::F32, d, "s");
        ops::amax(x, a, blocks, transposed);
        Tensor q = Tensor::empty({orow, ocol}, format, d, "q");
        ops::fp8_quantize(x, a, transposed ? Tensor() : q, transposed ? q : Tensor(), inv, blocks);
        const int max_exp = format == DType::E4M3 ? ops::kE4M3MaxExp : ops::kE5M2MaxExp;
        const auto* bytes = static_cast<const uint8_t*>(q.raw());
        int distinct = 0;
        float first = 0;
        for (int64_t i = 0; i < orow; ++i)
          for (int64_t j = 0; j < ocol; ++j) {
            const int64_t k = g.at(i / g.block_rows, j / g.block_cols);
            bool finite = true;
            const int e = ops::fp8_scale_exponent(a.f32()[k], max_exp, &finite);
            ASSERT_EQ(inv.f32()[k], ops::fp8_pow2(-e));
            const float v = element(x, transposed, i, j) * ops::fp8_pow2(e);
            ASSERT_EQ(bytes[i * ocol + j], format == DType::E4M3 ? f32_to_e4m3(v) : f32_to_e5m2(v))
                << dtype_name(format) << " blocks " << blocks.rows << "x" << blocks.cols << " at " << i << "," << j;
            if (i == 0 && j == 0) first = inv.f32()[k];
            if (inv.f32()[k] != first) ++distinct;
          }
        EXPECT_GT(distinct, 0) << "every block got the same scale: the test data does not tell blocks apart";
      }
  // Blocks that make one scale are the tensorwise path: q and q_t together, the same bytes.
  Tensor a = scalar_f32(d), inv = scalar_f32(d);
  ops::amax(x, a, {r, c});
  Tensor q = Tensor::empty({r, c}, DType::E4M3, d, "q"), qt = Tensor::empty({c, r}, DType::E4M3, d, "qt");
  ops::fp8_quantize(x, a, q, qt, inv, {r, c});
  EXPECT_THROW(ops::fp8_quantize(x, Tensor::empty({r}, DType::F32, d, "a"), q, qt,
                                 Tensor::empty({r}, DType::F32, d, "s"), kRowwise),
               Error);
}

// d = sum_k a[m, k] / s_a(block) * b[n, k] / s_b(block) + bias + c against float64, for each pair of blocks Hopper
// takes; K = 272 leaves a partial last tile.
TEST(OpsFp8Blocks, MatmulSumsTheBlockScaledProducts) {
  device::CpuDevice d;
  const int64_t m = 40, n = 160, k = 272;
  Tensor x = uneven(d, m, k, 6), w = uneven(d, n, k, 7);
  for (const auto& [ab, bb] : {std::pair{kRowwise, kRowwise}, std::pair{kTile1x128, kTile128x128},
                               std::pair{kTile128x128, kTile1x128}, std::pair{kTile1x128, kTile1x128}}) {
    const auto quantized = [&](const Tensor& t, Fp8Blocks blocks, DType format) {
      const Fp8ScaleGrid g = ops::fp8_scale_grid(t.dim(0), t.dim(1), blocks);
      Tensor a = Tensor::empty({g.count}, DType::F32, d, "amax"), inv = Tensor::empty({g.count}, DType::F32, d, "s");
      ops::amax(t, a, blocks);
      Tensor q = Tensor::empty({t.dim(0), t.dim(1)}, format, d, "q");
      ops::fp8_quantize(t, a, q, Tensor(), inv, blocks);
      return std::pair{q, inv};
    };
    const auto [qa, ia] = quantized(x, ab, DType::E4M3);
    const auto [qb, ib] = quantized(w, bb, DType::E5M2);
    Tensor bias = randn(d, {n}, 8), c = randn(d, {m, n}, 9);
    Tensor y = Tensor::empty({m, n}, DType::F32, d, "d");
    ops::fp8_matmul(qa, ia, qb, ib, bias, c, y, false, ab, bb);
    const std::vector<double> av = testing::values(qa), bv = testing::values(qb);
    const Fp8ScaleGrid ga = ops::fp8_scale_grid(m, k, ab), gb = ops::fp8_scale_grid(n, k, bb);
    std::vector<double> want(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += av[i * k + p] * ia.f32()[ga.at(i / ga.block_rows, p / ga.block_cols)] * bv[j * k + p] *
               ib.f32()[gb.at(j / gb.block_rows, p / gb.block_cols)];
        want[i * n + j] = s + bias.f32()[j] + c.f32()[i * n + j];
      }
    EXPECT_LE(testing::rel_error(testing::values(y), want), 1e-6)
        << ab.rows << "x" << ab.cols << " with " << bb.rows << "x" << bb.cols;
  }
}

// Signal-to-quantization-noise ratio of row i of got (R, C) against want, in dB.
double row_sqnr_db(const std::vector<double>& got, const std::vector<double>& want, int64_t i, int64_t c) {
  double signal = 0, noise = 0;
  for (int64_t j = i * c; j < (i + 1) * c; ++j) {
    signal += want[j] * want[j];
    noise += (got[j] - want[j]) * (got[j] - want[j]);
  }
  return 10 * std::log10(signal / noise);
}

// y = x W^T with x's rows spread over 2^-30..1 (tokens of very different norm): one scale for x rounds the small rows
// to subnormals or zero, while a scale per row or per 1 x 128 tile keeps every row near e4m3's own 29 dB.
TEST(OpsFp8Blocks, PerRowAndPerTileScalesKeepSmallRows) {
  device::CpuDevice d;
  const int64_t n = 64, in = 256, out = 128;
  Tensor x = randn(d, {n, in}, 10), w = randn(d, {out, in}, 11, 0.02f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < in; ++j) x.f32()[i * in + j] *= std::ldexp(1.0f, -static_cast<int>(i % 31));
  Tensor y = Tensor::empty({n, out}, DType::F32, d, "y");
  ops::matmul(x, w, y, false, true);
  const std::vector<double> want = testing::values(y);
  double worst[3] = {};
  const Fp8Blocks recipes[3][2] = {{{}, {}}, {kRowwise, kRowwise}, {kTile1x128, kTile128x128}};
  for (int r = 0; r < 3; ++r) {
    const auto quantized = [&](const Tensor& t, Fp8Blocks blocks) {
      const Fp8ScaleGrid g = ops::fp8_scale_grid(t.dim(0), t.dim(1), blocks);
      Tensor a = Tensor::empty({g.count}, DType::F32, d, "amax"), inv = Tensor::empty({g.count}, DType::F32, d, "s");
      ops::amax(t, a, blocks);
      Tensor q = Tensor::empty({t.dim(0), t.dim(1)}, DType::E4M3, d, "q");
      ops::fp8_quantize(t, a, q, Tensor(), inv, blocks);
      return std::pair{q, inv};
    };
    const auto [qx, ix] = quantized(x, recipes[r][0]);
    const auto [qw, iw] = quantized(w, recipes[r][1]);
    Tensor y8 = Tensor::empty({n, out}, DType::F32, d, "y8");
    ops::fp8_matmul(qx, ix, qw, iw, Tensor(), Tensor(), y8, false, recipes[r][0], recipes[r][1]);
    const std::vector<double> got = testing::values(y8);
    worst[r] = 1e9;
    for (int64_t i = 0; i < n; ++i) worst[r] = std::min(worst[r], row_sqnr_db(got, want, i, out));
  }
  std::printf("worst row's SQNR: tensorwise %.1f dB, rowwise %.1f dB, blockwise %.1f dB\n", worst[0], worst[1],
              worst[2]);
  EXPECT_LT(worst[0], 10);
  EXPECT_GE(worst[1], 25);
  EXPECT_GE(worst[2], 25);
}

}  // namespace
}  // namespace tandem
