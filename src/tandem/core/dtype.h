// Element types and the scalar conversions between them. Storage only: CPU math is always fp32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace tandem {

// E4M3 and E5M2: Hopper's 8-bit floats (OCP FP8: e4m3 has no inf, its largest finite value is 448; e5m2 is IEEE-like,
// largest finite 57344). Storage for the FP8 GEMMs' operands only: no op but the FP8 ones reads them.
enum class DType : uint8_t { F32, BF16, F16, I32, E4M3, E5M2 };

size_t dtype_size(DType t);
std::string dtype_name(DType t);  // "f32", "bf16", "f16", "i32", "e4m3", "e5m2"
DType dtype_from_name(const std::string& name);

// bf16: the top 16 bits of an fp32, rounded to nearest even. NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half precision, round to nearest even; overflow gives inf.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

// FP8, round to nearest even, saturating: a magnitude past the format's largest finite value (inf included) becomes
// that value; NaN stays NaN. What CUDA's __nv_cvt_float_to_fp8 gives with __NV_SATFINITE.
inline constexpr float kE4M3Max = 448.0f, kE5M2Max = 57344.0f;
uint8_t f32_to_e4m3(float f);
uint8_t f32_to_e5m2(float f);
float e4m3_to_f32(uint8_t b);
float e5m2_to_f32(uint8_t b);

}  // namespace tandem
