// Element types and the scalar conversions between them. Storage only: CPU math is always fp32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace tandem {

enum class DType : uint8_t { F32, BF16, F16, I32 };

size_t dtype_size(DType t);
std::string dtype_name(DType t);  // "f32", "bf16", "f16", "i32"
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

}  // namespace tandem
