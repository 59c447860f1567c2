#include "tandem/core/dtype.h"

#include <cmath>

#include "tandem/core/error.h"

namespace tandem {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::E4M3:
    case DType::E5M2:
      return 1;
  }
  return 0;
}

std::string dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::I32:
      return "i32";
    case DType::E4M3:
      return "e4m3";
    case DType::E5M2:
      return "e5m2";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  if (name == "f16") return DType::F16;
  if (name == "i32") return DType::I32;
  if (name == "e4m3") return DType::E4M3;
  if (name == "e5m2") return DType::E5M2;
  TANDEM_FAIL("unknown dtype '", name, "': expected f32, bf16, f16, i32, e4m3 or e5m2");
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
  if (abs < 0x38800000u) {                                               // subnormal or zero in f16
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // below half the smallest subnormal
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      u = sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace {

// An FP8 format of `mant` mantissa bits and exponent bias `bias`, whose largest finite value is `max`.
uint8_t f32_to_fp8(float f, int mant, int bias, float max, uint8_t nan) {
  if (std::isnan(f)) return nan;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fmin(std::fabs(f), max);
  if (a == 0.0f) return sign;
  int e = std::ilogb(a);  // a = m 2^e, 1 <= m < 2
  const int min_normal = 1 - bias;
  if (e < min_normal) e = min_normal;  // subnormal: the quantum of the smallest exponent
  // a / 2^(e - mant) is exact (a power-of-two scaling of a normal fp32); rounding it to an integer is the RNE rounding
  // to the format's grid at this exponent.
  auto q = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, mant - e)));
  if (q == (2u << mant)) {  // rounded up to the next binade
    q = 1u << mant;
    ++e;
  }
  if (q < (1u << mant)) return static_cast<uint8_t>(sign | q);  // subnormal (exponent field 0)
  return static_cast<uint8_t>(sign | (static_cast<uint32_t>(e + bias) << mant) | (q - (1u << mant)));
}

float fp8_to_f32(uint8_t b, int mant, int bias) {
  const int exp_bits = 7 - mant, field = (b >> mant) & ((1 << exp_bits) - 1), m = b & ((1 << mant) - 1);
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  if (field == 0) return sign * std::ldexp(static_cast<float>(m), 1 - bias - mant);
  return sign * std::ldexp(static_cast<float>((1 << mant) | m), field - bias - mant);
}

}  // namespace

uint8_t f32_to_e4m3(float f) { return f32_to_fp8(f, 3, 7, kE4M3Max, 0x7f); }
uint8_t f32_to_e5m2(float f) { return f32_to_fp8(f, 2, 15, kE5M2Max, 0x7f); }

float e4m3_to_f32(uint8_t b) {
  if ((b & 0x7f) == 0x7f) return std::nanf("");
  return fp8_to_f32(b, 3, 7);
}
float e5m2_to_f32(uint8_t b) {
  if ((b & 0x7c) == 0x7c) return (b & 0x03) ? std::nanf("") : ((b & 0x80) ? -INFINITY : INFINITY);
  return fp8_to_f32(b, 2, 15);
}

}  // namespace tandem
