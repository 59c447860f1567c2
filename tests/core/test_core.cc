// Core: dtype conversions (FP8's against a nearest-value search), Philox streams and the initial values' draws,
// size parsing, tensor views.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/philox.h"
#include "tandem/core/random_fill.h"
#include "tandem/core/tensor.h"
#include "tandem/core/units.h"
#include "tandem/device/cpu_device.h"

namespace tandem {

TEST(DType, Bf16RoundTripWithinHalfUlp) {
  for (float f : {1.0f, -2.5f, 3.14159f, 1e-20f, 65504.0f, -1e30f}) {
    const float back = bf16_to_f32(f32_to_bf16(f));
    EXPECT_LE(std::fabs(back - f), std::fabs(f) * (1.0f / 256)) << f;
  }
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);                   // overflow -> inf
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  for (float f : {0.1f, -7.25f, 1000.5f, 3e-6f}) EXPECT_NEAR(f16_to_f32(f32_to_f16(f)), f, std::fabs(f) / 1024 + 6e-8);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

// The FP8 rounding against a reference that knows nothing of bit layouts: the nearest of every finite value the
// format has (decoded by e4m3_to_f32 / e5m2_to_f32, themselves checked on known codes), ties to the even code,
// magnitudes past the largest finite value saturating to it.
uint8_t nearest_fp8(float f, float (*decode)(uint8_t), bool e4m3) {
  const float max = e4m3 ? kE4M3Max : kE5M2Max;
  const float a = std::fmin(std::fabs(f), max);
  int best = -1;
  double best_d = 1e300;
  for (int code = 0; code < 128; ++code) {
    const float v = decode(static_cast<uint8_t>(code));
    if (!std::isfinite(v)) continue;
    const double d = std::fabs(static_cast<double>(v) - a);
    if (d < best_d || (d == best_d && (code & 1) == 0)) {
      best = code;
      best_d = d;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(f) ? 0x80 : 0));
}

TEST(DType, Fp8KnownCodes) {
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);                  // 0.0111.000
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);                // the largest finite
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  EXPECT_EQ(e5m2_to_f32(0x3c), 1.0f);                   // 0.01111.00
  EXPECT_EQ(e5m2_to_f32(0x7b), 57344.0f);               // the largest finite
  EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.0f, -16));  // the smallest subnormal
  EXPECT_EQ(e5m2_to_f32(0x7c), INFINITY);
  EXPECT_TRUE(std::isnan(e5m2_to_f32(0x7d)));
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7f);
  EXPECT_EQ(f32_to_e5m2(NAN), 0x7f);
  EXPECT_EQ(f32_to_e4m3(INFINITY), 0x7e);  // saturating
  EXPECT_EQ(f32_to_e4m3(-1e9f), 0xfe);
  EXPECT_EQ(f32_to_e5m2(INFINITY), 0x7b);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
}

TEST(DType, Fp8RoundsToTheNearestValueTiesToEven) {
  for (const bool e4m3 : {true, false}) {
    float (*decode)(uint8_t) = e4m3 ? &e4m3_to_f32 : &e5m2_to_f32;
    uint8_t (*encode)(float) = e4m3 ? &f32_to_e4m3 : &f32_to_e5m2;
    // Every finite code and both neighbours of it, every midpoint between neighbouring codes and points just off it.
    std::vector<float> probes;
    for (int code = 0; code < 127; ++code) {
      const float v = decode(static_cast<uint8_t>(code)), next = decode(static_cast<uint8_t>(code + 1));
      if (!std::isfinite(v)) continue;
      probes.push_back(v);
      if (!std::isfinite(next)) continue;
      const float mid = 0.5f * (v + next);
      probes.insert(probes.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)});
    }
    for (float f : {1e-12f, 1e-30f, 500.0f, 6e4f, 1e10f}) probes.push_back(f);
    for (const float p : probes)
      for (const float f : {p, -p}) {
        const uint8_t got = encode(f), want = nearest_fp8(f, decode, e4m3);
        EXPECT_EQ(decode(got), decode(want)) << (e4m3 ? "e4m3 " : "e5m2 ") << f;
        if (f != 0.0f) {
          EXPECT_EQ(got, want) << (e4m3 ? "e4m3 " : "e5m2 ") << f;
        }
      }
    for (int code = 0; code < 256; ++code) {
      const float v = decode(static_cast<uint8_t>(code));
      if (std::isfinite(v) && v != 0.0f) {
        EXPECT_EQ(encode(v), code) << "round trip of code " << code;
      }
    }
  }
}

TEST(Philox, DeterministicAndKeyedByEverything) {
  EXPECT_EQ(normal_at(1, 2, 3), normal_at(1, 2, 3));
  EXPECT_NE(normal_at(1, 2, 3), normal_at(2, 2, 3));
  EXPECT_NE(normal_at(1, 2, 3), normal_at(1, 3, 3));
  EXPECT_NE(normal_at(1, 2, 3), normal_at(1, 2, 4));
  EXPECT_NE(hash_name("blocks.0.qkv.weight"), hash_name("blocks.1.qkv.weight"));
}

TEST(Philox, NormalMoments) {
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = normal_at(7, 9, i);
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
}

// The normal draw is sqrt(-2 ln u1) cos(2 pi u2) computed in double with its own logarithm and cosine and rounded once:
// against the formula in long double, the same float or, where the exact value lies within double rounding of a float
// tie, its neighbour.
TEST(RandomFill, NormalIsBoxMullerRoundedOnce) {
  int off_by_one = 0;
  const int n = 300000;
  for (int i = 0; i < n; ++i) {
    const PhiloxBlock b = philox4x32({static_cast<uint32_t>(i), 0, 5, 0}, 11);
    const long double u1 = ((b[0] >> 8) + 1) / 16777216.0L, u2 = ((b[1] >> 8) + 1) / 16777216.0L;
    const long double exact = std::sqrt(-2.0L * std::log(u1)) * std::cos(6.283185307179586476925286766559L * u2);
    const float want = static_cast<float>(exact), got = normal_from_words(b[0], b[1]);
    if (got == want) continue;
    ++off_by_one;
    EXPECT_EQ(got, std::nextafter(want, got)) << "draw " << i << ": " << got << " against " << want;
  }
  EXPECT_LE(off_by_one, 3) << "of " << n;
}

// Edges of the two words: u1 = 1 (radius 0), the smallest u1, and u2 at each quarter turn and its neighbours.
TEST(RandomFill, NormalAtTheEdges) {
  EXPECT_EQ(normal_from_words(0xffffffffu, 0), 0.0f);
  const float r = static_cast<float>(std::sqrt(-2.0L * std::log(1.0L / 16777216.0L)));  // 5.7683...
  for (uint32_t q = 0; q <= 4; ++q) {
    const uint32_t j = q << 22;  // u2 = (j + 1) / 2^24 with j = (w2 >> 8): one step past q quarters
    for (uint32_t d : {0u, 1u}) {
      const uint32_t w2 = ((j + d - 1) & 0xffffffu) << 8;
      const long double exact = std::sqrt(-2.0L * std::log(1.0L / 16777216.0L)) *
                                std::cos(6.283185307179586476925286766559L * (((w2 >> 8) + 1) / 16777216.0L));
      EXPECT_NEAR(normal_from_words(0, w2), static_cast<float>(exact), 1e-6f * r) << "quarter " << q << " + " << d;
    }
  }
  EXPECT_EQ(normal_from_words(0, 0xffffff00u), r);  // u2 = 1: a whole turn
}

// A part of a tensor draws what the whole holds at its elements' logical indices, for every part of a fused,
// unequally blocked split.
TEST(RandomFill, PartsDrawTheWholesElements) {
  RandomFill whole;
  whole.kind = RandomKind::Normal;
  whole.scale = 0.02f;
  whole.seed = 3;
  whole.stream = hash_name("blocks.0.qkv.weight");
  const int64_t outer = 2, split = 16, inner = 3, numel = outer * split * inner;
  std::vector<float> all(numel);
  random_fill_host(all.data(), numel, whole);
  for (RandomKind kind : {RandomKind::Normal, RandomKind::Uniform}) {
    whole.kind = kind;
    random_fill_host(all.data(), numel, whole);
    for (int64_t part = 0; part < 2; ++part) {
      RandomFill f = whole;
      f.shard = ShardIndex{outer, split, inner, part, 2, 3, {8, 4, 4, 0}};
      f.first = 5;  // from the part's sixth element
      std::vector<float> mine(numel / 2 - 5);
      random_fill_host(mine.data(), static_cast<int64_t>(mine.size()), f);
      for (size_t i = 0; i < mine.size(); ++i) {
        const int64_t g = f.shard.global_index(5 + static_cast<int64_t>(i));
        ASSERT_GE(g, 0);
        EXPECT_EQ(mine[i], all[static_cast<size_t>(g)]) << "part " << part << " element " << i;
      }
    }
  }
  EXPECT_EQ(all[7], 0.02f * (2.0f * uniform_at(3, whole.stream, 7) - 1.0f));
}

TEST(Units, ParseAndFormat) {
  EXPECT_EQ(parse_bytes("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_bytes("1.5 GB"), 1500000000ull);
  EXPECT_EQ(parse_bytes("4096"), 4096ull);
  EXPECT_EQ(parse_bytes("2gib"), 2ull << 30);
  EXPECT_THROW(parse_bytes("lots"), Error);
  EXPECT_THROW(parse_bytes("12 parsecs"), Error);
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_duration(65), "1m05s");
}

TEST(Tensor, ViewsShareStorage) {
  device::CpuDevice dev;
  Tensor t = Tensor::zeros({4, 3}, DType::F32, dev, "t");
  Tensor r = t.rows(1, 2);
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  r.f32()[0] = 5.0f;
  EXPECT_EQ(t.f32()[3], 5.0f);
  Tensor s = t.flat_slice(6, 6, {6});
  EXPECT_EQ(s.f32(), t.f32() + 6);
  EXPECT_THROW(t.view({5, 3}), Error);
  EXPECT_THROW(t.i32(), Error);  // wrong dtype
}

}  // namespace tandem
