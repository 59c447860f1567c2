// Helpers shared by the tests: devices, random tensors, float64 copies and error norms.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/random_fill.h"
#include "tandem/core/tensor.h"

namespace tandem::testing {

// Fills an f32 tensor with N(0, stddev) values from a counter-based stream (never zeros).
inline void fill_normal(const Tensor& t, uint64_t seed, float stddev = 1.0f) {
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = stddev * normal_at(seed, 0x7e57, static_cast<uint64_t>(i));
}

inline std::vector<double> to_double(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  const float* p = t.f32();
  for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  return out;
}

// ||a - b|| / ||b|| over all elements (b is the reference).
inline double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// The message of the tandem::Error that `fn` throws; a test failure (and "") when it throws none.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tandem::Error";
  return "";
}

}  // namespace tandem::testing

// EXPECT_HAS(message, part): the message contains part.
#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)
