// Breakdown: device bytes by what they hold (MemoryPurpose), the terms every live count, peak and prediction is
// given in.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "tandem/core/device_interface.h"

namespace tandem::device {

struct Breakdown {
  std::array<int64_t, kMemoryPurposes> bytes{};

  int64_t& operator[](MemoryPurpose p) { return bytes[static_cast<size_t>(p)]; }
  int64_t operator[](MemoryPurpose p) const { return bytes[static_cast<size_t>(p)]; }
  int64_t total() const {
    int64_t s = 0;
    for (int64_t b : bytes) s += b;
    return s;
  }
  Breakdown& operator+=(const Breakdown& o) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] += o.bytes[i];
    return *this;
  }
  Breakdown& operator-=(const Breakdown& o) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] -= o.bytes[i];
    return *this;
  }
  friend Breakdown operator+(Breakdown a, const Breakdown& b) { return a += b; }
  friend Breakdown operator-(Breakdown a, const Breakdown& b) { return a -= b; }
  bool operator==(const Breakdown&) const = default;
  MemoryPurpose largest() const;  // the purpose holding the most bytes
  // "parameters 1.2 GiB, gradients 1.2 GiB, ..." (purposes of zero bytes left out)
  std::string describe() const;
};

}  // namespace tandem::device
