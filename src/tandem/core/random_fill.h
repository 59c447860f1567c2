// Initial values drawn where they are stored. An element's value depends only on (seed, the parameter's stream, its
// index in the logical tensor), so any device fills any shard of a tensor on its own, and a GPU draws the bits the
// host draws: the normal's logarithm and cosine below are this file's own, in double arithmetic whose every operation
// is rounded once (the GPU's intrinsics; on the host, translation units compiled with -ffp-contract=off), not a math
// library's, whose last bits differ between the host and the GPU.
// The host's draws come from random_fill.cc (random_fill_host); the GPU's from ops/cuda/random_fill.cu. Code elsewhere
// calls those, not the inline functions, so that no other translation unit's contraction rules apply.
#pragma once

#include <cstdint>

#include "tandem/core/host_device.h"
#include "tandem/core/philox.h"
#include "tandem/core/shard_index.h"

namespace tandem {

enum class RandomKind : int32_t { Normal, Uniform };

// What random_fill draws into out[0, n): element i is scale * N(0, 1) (Normal) or scale * U(-1, 1] (Uniform) at the
// logical index shard.global_index(first + i) of `stream` under `seed`.
struct RandomFill {
  RandomKind kind = RandomKind::Normal;
  float scale = 1.0f;  // the standard deviation, or the bound
  uint64_t seed = 0, stream = 0;
  int64_t first = 0;  // the part's element that out[0] holds
  ShardIndex shard;
};

namespace random_detail {

// One rounding per operation on both sides: the GPU's _rn intrinsics are never fused into an fma.
TANDEM_HOST_DEVICE inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
TANDEM_HOST_DEVICE inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
TANDEM_HOST_DEVICE inline double div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
TANDEM_HOST_DEVICE inline double sqrt_rn(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);
#endif
}

inline constexpr double kLn2 = 0.69314718055994530942;
inline constexpr double kSqrtHalf = 0.70710678118654752440;
inline constexpr double kTwoPiOver2To24 = 6.28318530717958647692 / 16777216.0;  // exact: a power-of-two quotient

// -2 ln(n / 2^24) for an integer n in [1, 2^24]: n = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^23 (the rest below 1e-19).
TANDEM_HOST_DEVICE inline double minus_two_log_fraction(uint32_t n) {
  int e = 0;
  while ((n >> (e + 1)) != 0) ++e;                                                // e = floor(log2 n), at most 24
  double m = div(static_cast<double>(n), static_cast<double>(uint32_t{1} << e));  // exact
  if (m > 2.0 * kSqrtHalf) {
    m = mul(m, 0.5);  // exact
    ++e;
  }
  const double s = div(add(m, -1.0), add(m, 1.0)), s2 = mul(s, s);
  double p = 1.0 / 23.0;
  for (int k = 21; k >= 1; k -= 2) p = add(mul(p, s2), 1.0 / k);
  const double ln = add(mul(static_cast<double>(e - 24), kLn2), mul(mul(2.0, s), p));  // ln(n / 2^24) <= 0
  return mul(-2.0, ln);
}

// cos(x) and sin(x) for |x| <= pi/4 by their Taylor series to x^20 and x^21 (the rest below 1e-20).
TANDEM_HOST_DEVICE inline double cos_small(double x) {
  const double x2 = mul(x, x);
  double p = 1.0;
  for (int k = 10; k >= 1; --k) p = add(1.0, -mul(x2, mul(p, 1.0 / ((2 * k - 1) * (2 * k)))));
  return p;
}
TANDEM_HOST_DEVICE inline double sin_small(double x) {
  const double x2 = mul(x, x);
  double p = 1.0;
  for (int k = 10; k >= 1; --k) p = add(1.0, -mul(x2, mul(p, 1.0 / ((2 * k) * (2 * k + 1)))));
  return mul(x, p);
}

// cos(2 pi j / 2^24) for an integer j in [1, 2^24], reduced exactly in integers to an argument within pi/4.
TANDEM_HOST_DEVICE inline double cos_turn_fraction(uint32_t j) {
  constexpr int32_t kFull = 1 << 24, kHalf = 1 << 23, kQuarter = 1 << 22, kEighth = 1 << 21;
  int32_t r = static_cast<int32_t>(j & (kFull - 1));
  if (r > kHalf) r = kFull - r;  // cos(2 pi (1 - t)) = cos(2 pi t): r in [0, 2^23]
  if (r <= kEighth) return cos_small(mul(static_cast<double>(r), kTwoPiOver2To24));
  if (r < kQuarter + kEighth) return sin_small(mul(static_cast<double>(kQuarter - r), kTwoPiOver2To24));
  return -cos_small(mul(static_cast<double>(kHalf - r), kTwoPiOver2To24));
}

}  // namespace random_detail

// N(0, 1) by Box-Muller from two Philox words: sqrt(-2 ln u1) cos(2 pi u2) with u = ((word >> 8) + 1) / 2^24 in
// (0, 1] (uniform_from_bits), in double and rounded once to float.
TANDEM_HOST_DEVICE inline float normal_from_words(uint32_t w1, uint32_t w2) {
  using namespace random_detail;
  const double radius = sqrt_rn(minus_two_log_fraction((w1 >> 8) + 1));
  return static_cast<float>(mul(radius, cos_turn_fraction((w2 >> 8) + 1)));
}

// Element i of a RandomFill.
TANDEM_HOST_DEVICE inline float random_fill_value(const RandomFill& f, int64_t i) {
  uint32_t c[4];
  philox_block_at(f.seed, f.stream, static_cast<uint64_t>(f.shard.global_index(f.first + i)), c);
  if (f.kind == RandomKind::Normal) return f.scale * normal_from_words(c[0], c[1]);
  return f.scale * (2.0f * uniform_from_bits(c[2]) - 1.0f);  // (0, 1] to (-1, 1]: both steps exact
}

// out[0, n) = the RandomFill's elements 0..n-1, on the host's cores.
void random_fill_host(float* out, int64_t n, const RandomFill& fill);

// N(0, 1) for element `index` of the stream `stream` under `seed` (Box-Muller on one Philox block: normal_from_words
// above, the GPU's bits too).
float normal_at(uint64_t seed, uint64_t stream, uint64_t index);
// U(0, 1] for element `index`; the same block as normal_at, a different word.
float uniform_at(uint64_t seed, uint64_t stream, uint64_t index);
// A 64-bit integer for element `index`.
uint64_t bits64_at(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace tandem
