// Core: dtype conversions (FP8's against a nearest-value search), Philox streams, size parsing, tensor views.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/philox.h"
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
        if (f != 0.0f) EXPECT_EQ(got, want) << (e4m3 ? "e4m3 " : "e5m2 ") << f;
      }
    for (int code = 0; code < 256; ++code) {
      const float v = decode(static_cast<uint8_t>(code));
      if (std::isfinite(v) && v != 0.0f) EXPECT_EQ(encode(v), code) << "round trip of code " << code;
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
