// The per-tensor FP8 scale (ops.h, "FP8") as one function of the tensor's amax, for the CPU kernels and the CUDA
// ones alike: integer work on the fp32 bits, so both compute the same power of two.
#pragma once

#include <cstdint>
#include <cstring>

#include "tandem/core/host_device.h"

namespace tandem::ops {

// The exponent e of the scale 2^e for a tensor of largest magnitude `amax` in a format whose largest finite value is
// 1.75 * 2^max_exp (e4m3: 448 = 1.75 * 2^8, e5m2: 57344 = 1.75 * 2^15): the largest e with amax * 2^e <= that value,
// clamped to [-126, 126]; 0 when amax is 0 or not finite. `finite` is set false for a non-finite amax.
TANDEM_HOST_DEVICE inline int fp8_scale_exponent(float amax, int max_exp, bool* finite) {
  uint32_t u;
  memcpy(&u, &amax, 4);
  u &= 0x7fffffffu;
  *finite = u < 0x7f800000u;
  if (!*finite || u == 0) return 0;
  // amax = m * 2^E with 1 <= m < 2 (a subnormal amax is below 2^-126, whose e clamps to 126 anyway).
  const int E = u < 0x00800000u ? -127 : static_cast<int>(u >> 23) - 127;
  const bool over = (u & 0x7fffffu) > 0x600000u;  // m > 1.75
  int e = max_exp - E - (over ? 1 : 0);
  if (e > 126) e = 126;
  if (e < -126) e = -126;
  return e;
}

// 2^e as a float, for |e| <= 126.
TANDEM_HOST_DEVICE inline float fp8_pow2(int e) {
  const uint32_t u = static_cast<uint32_t>(e + 127) << 23;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

inline constexpr int kE4M3MaxExp = 8, kE5M2MaxExp = 15;

}  // namespace tandem::ops
