#include "tandem/core/dtype.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

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

// An FP8 format of `mant` mantissa bits and exponent bias `bias`, whose largest finite value is `max`; round to
// nearest even on the bits of the fp32: a magnitude in the format's normal range keeps its exponent, and rounding its
// mantissa to `mant` bits may carry into the exponent (the next binade), which the addition does by itself.
uint8_t f32_to_fp8(float f, int mant, int bias, float max, uint8_t nan) {
  if (std::isnan(f)) return nan;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f) > max ? max : std::fabs(f);  // inf included
  uint32_t u;
  std::memcpy(&u, &a, 4);
  const uint32_t min_normal = static_cast<uint32_t>(128 - bias) << 23;  // fp32 bits of 2^(1 - bias)
  if (u >= min_normal) {
    const int drop = 23 - mant;
    const uint32_t up = u + ((1u << (drop - 1)) - 1) + ((u >> drop) & 1);  // round half to even
    return static_cast<uint8_t>(sign | ((up >> drop) - (static_cast<uint32_t>(127 - bias) << mant)));
  }
  // Below the smallest normal the grid's step is 2^(1 - bias - mant): a times its inverse (a power of two, exact)
  // rounded to an integer is the subnormal's mantissa field; 1 << mant rounds up to the smallest normal, whose
  // exponent field 1 the same bits give.
  float step_inverse;
  const uint32_t inverse_bits = static_cast<uint32_t>(127 + bias - 1 + mant) << 23;
  std::memcpy(&step_inverse, &inverse_bits, 4);
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(a * step_inverse)));
}

// The fp32 bits of every byte of an FP8 format (`mant` mantissa bits, exponent bias `bias`): exact, since every FP8
// value is an fp32. `nan` says which bytes are NaN (the quiet NaN std::nanf gives, without the sign) and `inf` which
// are infinities.
struct Fp8Table {
  std::array<float, 256> value;
  Fp8Table(int mant, int bias, bool (*nan)(uint8_t), bool (*inf)(uint8_t)) {
    for (int b = 0; b < 256; ++b) {
      const auto byte = static_cast<uint8_t>(b);
      const uint32_t sign = (b & 0x80) ? 0x80000000u : 0u;
      const uint32_t field = (b & 0x7f) >> mant, m = b & ((1u << mant) - 1);
      uint32_t bits = sign;
      if (nan(byte)) {
        bits = 0x7fc00000u;
      } else if (inf(byte)) {
        bits = sign | 0x7f800000u;
      } else if (field != 0) {
        bits = sign | ((field - bias + 127) << 23) | (m << (23 - mant));
      } else if (m != 0) {  // subnormal: m 2^(1 - bias - mant), normalised
        const int top = std::bit_width(m) - 1;
        bits =
            sign | (static_cast<uint32_t>(top + 1 - bias - mant + 127) << 23) | ((m & ((1u << top) - 1)) << (23 - top));
      }
      std::memcpy(&value[static_cast<size_t>(b)], &bits, 4);
    }
  }
};

bool e4m3_nan(uint8_t b) { return (b & 0x7f) == 0x7f; }
bool e5m2_nan(uint8_t b) { return (b & 0x7c) == 0x7c && (b & 0x03) != 0; }
bool e5m2_inf(uint8_t b) { return (b & 0x7f) == 0x7c; }
bool none(uint8_t) { return false; }

}  // namespace

uint8_t f32_to_e4m3(float f) { return f32_to_fp8(f, 3, 7, kE4M3Max, 0x7f); }
uint8_t f32_to_e5m2(float f) { return f32_to_fp8(f, 2, 15, kE5M2Max, 0x7f); }

float e4m3_to_f32(uint8_t b) {
  static const Fp8Table table(3, 7, &e4m3_nan, &none);
  return table.value[b];
}
float e5m2_to_f32(uint8_t b) {
  static const Fp8Table table(2, 15, &e5m2_nan, &e5m2_inf);
  return table.value[b];
}

}  // namespace tandem
