// CPU reductions: sum_squares, in double, with a summation order fixed by the tensor's size alone.
// A fixed number of chunks (not one per thread) keeps the result bit-identical across thread counts.
#include <algorithm>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

constexpr int64_t kChunks = 64;
// Independent accumulators per chunk: one double add chain is latency bound; eight fixed lanes are not, and
// still sum in an order that depends on the index only.
constexpr int64_t kLanes = 8;

}  // namespace

double sum_squares(const Tensor& x) {
  const int64_t n = x.numel();
  const float* p = x.f32();  // (n)
  const int64_t chunk = (n + kChunks - 1) / kChunks;
  double partial[kChunks] = {};  // (kChunks)
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < kChunks; ++c) {
    const int64_t begin = std::min(n, c * chunk), end = std::min(n, begin + chunk);
    double lane[kLanes] = {};  // (kLanes)
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(p[i + l]) * p[i + l];
    for (; i < end; ++i) lane[0] += static_cast<double>(p[i]) * p[i];
    double s = 0.0;
    for (int64_t l = 0; l < kLanes; ++l) s += lane[l];
    partial[c] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < kChunks; ++c) total += partial[c];
  return total;
}

}  // namespace tandem::ops::cpu
