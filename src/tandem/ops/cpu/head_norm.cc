// CPU RMSNorm per head (ops.h): the first H heads of each row normalised with the q gain, the next Hkv with the k gain,
// the rest of the row copied; forward (saving rstd per row and head) and backward, over f32, bf16 and f16 storage with
// fp32 math (a head's sum of squares in double, as cpu/rmsnorm.cc's rows). The gains' gradients are column sums over
// every row and head in a fixed order, so results do not depend on the thread count. A head wider than its row (given
// sums) reads its statistic from them; head_norm_sums makes a row's part of them.
#include <algorithm>
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Gain columns per task of the gains' reduction: each column of each gain belongs to one task, which sums the rows
// and heads in order.
constexpr int64_t kGainChunk = 16;

struct HeadDims {
  int64_t rows, width, d;  // N rows of W elements, heads of D
  int heads, kv_heads;     // H heads with the q gain, then Hkv with the k gain
  int normed() const { return heads + kv_heads; }
};

HeadDims dims_of(const Tensor& x, int64_t d, int heads, int kv_heads) {
  return {rows_of(x), cols_of(x), d, heads, kv_heads};
}

// A whole head's statistic: the sums given (N, H + Hkv) over `width` columns, or none (the head's own D).
struct WholeSums {
  const float* sums = nullptr;
  int64_t width = 0;
};

WholeSums whole_of(const Tensor& sums, int64_t width) {
  return sums.defined() ? WholeSums{sums.f32(), width} : WholeSums{};
}

template <class T>
void forward_kernel(const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, const HeadDims& s, const Tensor& y,
                    const Tensor& rstd, float eps, WholeSums whole) {
  const T* in = elems<T>(x);       // (N, W)
  const T* gq = elems<T>(q_gain);  // (D)
  const T* gk = elems<T>(k_gain);  // (D)
  T* out = elems<T>(y);            // (N, W)
  float* rs = elems<float>(rstd);  // (N, H + Hkv)
  const bool in_place = x.raw() == y.raw();
  const int64_t normed = s.normed() * s.d;
#pragma omp parallel for schedule(static) if (worth_parallel(s.rows * s.width, kRowPassCost))
  for (int64_t i = 0; i < s.rows; ++i) {
    for (int h = 0; h < s.normed(); ++h) {
      const T* xh = in + i * s.width + h * s.d;  // (D)
      const T* g = h < s.heads ? gq : gk;        // (D)
      double sq = 0.0, n = static_cast<double>(s.d);
      if (whole.sums) {
        sq = whole.sums[i * s.normed() + h];
        n = static_cast<double>(whole.width);
      } else {
        for (int64_t j = 0; j < s.d; ++j) sq += static_cast<double>(load(xh, j)) * load(xh, j);
      }
      const float r = static_cast<float>(1.0 / std::sqrt(sq / n + static_cast<double>(eps)));
      T* yh = out + i * s.width + h * s.d;  // (D); element j of x is read before element j of y is written
      for (int64_t j = 0; j < s.d; ++j) store(yh, j, rounded<T>(load(xh, j) * r) * load(g, j));
      rs[i * s.normed() + h] = r;
    }
    if (!in_place) std::copy(in + i * s.width + normed, in + (i + 1) * s.width, out + i * s.width + normed);
  }
}

template <class T>
void backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, const HeadDims& s,
                     const Tensor& rstd, const Tensor& dx, const Tensor& dq_gain, const Tensor& dk_gain,
                     WholeSums whole) {
  const T* gy = elems<T>(dy);            // (N, W)
  const T* in = elems<T>(x);             // (N, W)
  const T* gq = elems<T>(q_gain);        // (D)
  const T* gk = elems<T>(k_gain);        // (D)
  const float* rs = elems<float>(rstd);  // (N, H + Hkv)
  T* gx = elems<T>(dx);                  // (N, W)
  float* dgq = elems<float>(dq_gain);    // (D)
  float* dgk = elems<float>(dk_gain);    // (D)

  // The gains first: dx is written afterwards, so dx may be dy. Task (gain, chunk) sums its columns of that gain's
  // heads over rows then heads, in order.
  const int64_t chunks = (s.d + kGainChunk - 1) / kGainChunk;
#pragma omp parallel for schedule(static) if (worth_parallel(s.rows * s.normed() * s.d, kRowPassCost))
  for (int64_t task = 0; task < 2 * chunks; ++task) {
    const bool k = task >= chunks;
    const int64_t c0 = (task % chunks) * kGainChunk, width = std::min(kGainChunk, s.d - c0);
    const int h0 = k ? s.heads : 0, h1 = k ? s.normed() : s.heads;
    float acc[kGainChunk] = {};  // (width)
    for (int64_t i = 0; i < s.rows; ++i)
      for (int h = h0; h < h1; ++h) {
        const int64_t at = i * s.width + h * s.d + c0;
        const float r = rs[i * s.normed() + h];
        for (int64_t j = 0; j < width; ++j) acc[j] += load(gy + at, j) * rounded<T>(load(in + at, j) * r);
      }
    float* dg = (k ? dgk : dgq) + c0;  // (width)
    for (int64_t j = 0; j < width; ++j) dg[j] += acc[j];
  }

  // dx = rstd (g - xhat mean(g xhat)) per head, g = dy * gain, as cpu/rmsnorm.cc's rows; the other columns pass.
  const int64_t normed = s.normed() * s.d;
#pragma omp parallel for schedule(static) if (worth_parallel(s.rows * s.width, kRowPassCost))
  for (int64_t i = 0; i < s.rows; ++i) {
    for (int h = 0; h < s.normed(); ++h) {
      const int64_t at = i * s.width + h * s.d;
      const T* g = h < s.heads ? gq : gk;  // (D)
      const float r = rs[i * s.normed() + h];
      double sum_gx = 0.0, n = static_cast<double>(s.d);
      if (whole.sums) {  // the sums of dy * gain * x over the whole head, times its rstd
        sum_gx = static_cast<double>(whole.sums[i * s.normed() + h]) * r;
        n = static_cast<double>(whole.width);
      } else {
        for (int64_t j = 0; j < s.d; ++j) sum_gx += load(gy + at, j) * load(g, j) * (load(in + at, j) * r);
      }
      const float mean_gx = static_cast<float>(sum_gx / n);
      for (int64_t j = 0; j < s.d; ++j) {  // element j of dy is read before element j of dx is written
        const float xhat = load(in + at, j) * r;
        store(gx + at, j, r * (load(gy + at, j) * load(g, j) - xhat * mean_gx));
      }
    }
    if (gx != gy) std::copy(gy + i * s.width + normed, gy + (i + 1) * s.width, gx + i * s.width + normed);
  }
}

// sums (N, H + Hkv) = per row and head, the sum over its D of a * b * gain (1 without gains), in double.
template <class T>
void sums_kernel(const Tensor& a, const Tensor& b, const Tensor& q_gain, const Tensor& k_gain, const HeadDims& s,
                 const Tensor& sums) {
  const T* pa = elems<T>(a);                                    // (N, W)
  const T* pb = elems<T>(b);                                    // (N, W)
  const T* gq = q_gain.defined() ? elems<T>(q_gain) : nullptr;  // (D) or none
  const T* gk = k_gain.defined() ? elems<T>(k_gain) : nullptr;  // (D) or none
  float* out = elems<float>(sums);                              // (N, H + Hkv)
#pragma omp parallel for schedule(static) if (worth_parallel(s.rows * s.normed() * s.d, kRowPassCost))
  for (int64_t i = 0; i < s.rows; ++i)
    for (int h = 0; h < s.normed(); ++h) {
      const int64_t at = i * s.width + h * s.d;
      const T* g = h < s.heads ? gq : gk;  // (D) or none
      double sum = 0.0;
      for (int64_t j = 0; j < s.d; ++j)
        sum += static_cast<double>(load(pa + at, j)) * load(pb + at, j) * (g ? load(g, j) : 1.0f);
      out[i * s.normed() + h] = static_cast<float>(sum);
    }
}

}  // namespace

void head_norm_forward(const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, int heads, int kv_heads,
                       const Tensor& y, const Tensor& rstd, float eps, const Tensor& sums, int64_t width) {
  const HeadDims s = dims_of(x, q_gain.dim(0), heads, kv_heads);
  if (s.rows == 0 || s.width == 0) return;
  const WholeSums whole = whole_of(sums, width);
  visit_float(x.dtype(), [&](auto t) { forward_kernel<decltype(t)>(x, q_gain, k_gain, s, y, rstd, eps, whole); });
}

void head_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& q_gain, const Tensor& k_gain, int heads,
                        int kv_heads, const Tensor& rstd, const Tensor& dx, const Tensor& dq_gain,
                        const Tensor& dk_gain, const Tensor& sums, int64_t width) {
  const HeadDims s = dims_of(x, q_gain.dim(0), heads, kv_heads);
  if (s.rows == 0 || s.width == 0) return;
  const WholeSums whole = whole_of(sums, width);
  visit_float(x.dtype(), [&](auto t) {
    backward_kernel<decltype(t)>(dy, x, q_gain, k_gain, s, rstd, dx, dq_gain, dk_gain, whole);
  });
}

void head_norm_sums(const Tensor& a, const Tensor& b, const Tensor& q_gain, const Tensor& k_gain, int heads,
                    int kv_heads, int64_t d, const Tensor& sums) {
  const HeadDims s = dims_of(a, d, heads, kv_heads);
  if (s.rows == 0 || s.normed() == 0) return;
  visit_float(a.dtype(), [&](auto t) { sums_kernel<decltype(t)>(a, b, q_gain, k_gain, s, sums); });
}

}  // namespace tandem::ops::cpu
