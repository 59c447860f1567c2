// CPU reductions: sum_squares of f32, bf16 or f16 elements, in double, with a summation order fixed by the
// tensor's size alone; sum_squares_total adds those of a list in list order.
// A fixed number of chunks (not one per thread) keeps the result bit-identical across thread counts.
#include <algorithm>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

constexpr int64_t kChunks = 64;
// Independent accumulators per chunk: one double add chain is latency bound; eight fixed lanes are not, and
// still sum in an order that depends on the index only.
constexpr int64_t kLanes = 8;

template <class T>
double sum_squares_kernel(const Tensor& x) {
  const int64_t n = x.numel();
  const T* p = elems<T>(x);  // (n)
  const int64_t chunk = (n + kChunks - 1) / kChunks;
  double partial[kChunks] = {};  // (kChunks)
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t c = 0; c < kChunks; ++c) {
    const int64_t begin = std::min(n, c * chunk), end = std::min(n, begin + chunk);
    double lane[kLanes] = {};  // (kLanes)
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) {
        const double v = load(p, i + l);
        lane[l] += v * v;
      }
    for (; i < end; ++i) {
      const double v = load(p, i);
      lane[0] += v * v;
    }
    double s = 0.0;
    for (int64_t l = 0; l < kLanes; ++l) s += lane[l];
    partial[c] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < kChunks; ++c) total += partial[c];
  return total;
}

}  // namespace

double sum_squares(const Tensor& x) {
  return visit_float(x.dtype(), [&](auto t) { return sum_squares_kernel<decltype(t)>(x); });
}

double sum_squares_total(const std::vector<Tensor>& xs) {
  double total = 0.0;  // in list order, as a caller's loop over sum_squares adds them
  for (const Tensor& x : xs) total += sum_squares(x);
  return total;
}

}  // namespace tandem::ops::cpu
