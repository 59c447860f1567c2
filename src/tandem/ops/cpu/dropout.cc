// CPU counter-based dropout (ops.h): each element's keep decision from its logical index alone, so rows or columns
// split over threads, micro-batches or tensor-parallel slots draw the same mask.
#include "tandem/core/philox.h"
#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// One Philox block per element: ten rounds, about as much work as a transcendental.
template <class T>
void dropout_kernel(const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t stream, int64_t row0,
                    int64_t width, int64_t col0) {
  const int64_t n = rows_of(x), c = cols_of(x);
  const T* in = elems<T>(x);  // (N, C)
  T* out = elems<T>(y);       // (N, C), may be in
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (worth_parallel(n * c, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t base = static_cast<uint64_t>(row0 + i) * static_cast<uint64_t>(width) + static_cast<uint64_t>(col0);
    for (int64_t j = 0; j < c; ++j) {
      const bool keep = uniform_from_bits(philox_uniform_word(seed, stream, base + static_cast<uint64_t>(j))) > p;
      store(out, i * c + j, keep ? load(in, i * c + j) * keep_scale : 0.0f);
    }
  }
}

}  // namespace

void dropout(const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t stream, int64_t row0, int64_t width,
             int64_t col0) {
  visit_float(x.dtype(), [&](auto t) { dropout_kernel<decltype(t)>(x, y, p, seed, stream, row0, width, col0); });
}

}  // namespace tandem::ops::cpu
