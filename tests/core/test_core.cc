// Core: dtype conversions, Philox streams, size parsing, tensor views.
#include <gtest/gtest.h>

#include <cmath>

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
