// Helpers for the op tests: random tensors on a CpuDevice, tensors from double vectors, central finite
// differences of a double-precision reference forward, and the same in the 16-bit compute dtypes.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tandem/device/cpu_device.h"
#include "test_util.h"

namespace tandem::testing {

inline Tensor randn(Device& device, const Shape& shape, uint64_t seed, float stddev = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::F32, device, "test input");
  fill_normal(t, seed, stddev);
  return t;
}

inline Tensor from_double(Device& device, const Shape& shape, const std::vector<double>& values) {
  Tensor t = Tensor::empty(shape, DType::F32, device, "test input");
  for (size_t i = 0; i < values.size(); ++i) t.f32()[i] = static_cast<float>(values[i]);
  return t;
}

inline Tensor ids_tensor(Device& device, const std::vector<int32_t>& ids) {
  Tensor t = Tensor::empty({static_cast<int64_t>(ids.size())}, DType::I32, device, "test ids");
  std::memcpy(t.i32(), ids.data(), ids.size() * sizeof(int32_t));
  return t;
}

inline Tensor copy_of(Device& device, const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), device, "test copy");
  c.copy_from(t);
  return c;
}

inline bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Every element as a double, whatever the dtype (16-bit values widen exactly).
inline std::vector<double> values(const Tensor& t) {
  const std::vector<float> f = t.to_host_floats();
  return std::vector<double>(f.begin(), f.end());
}

// A tensor of `dtype` holding `vals` rounded to it (through fp32). Tests read the stored values back with values(),
// so references see exactly what the op sees.
inline Tensor from_double_as(Device& device, const Shape& shape, const std::vector<double>& vals, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, device, "test input");
  for (size_t i = 0; i < vals.size(); ++i) {
    const float f = static_cast<float>(vals[i]);
    if (dtype == DType::F32) {
      t.f32()[i] = f;
    } else {
      t.u16()[i] = dtype == DType::BF16 ? f32_to_bf16(f) : f32_to_f16(f);
    }
  }
  return t;
}

// N(0, stddev) values rounded to `dtype`.
inline Tensor randn_as(Device& device, const Shape& shape, uint64_t seed, DType dtype, float stddev = 1.0f) {
  return from_double_as(device, shape, to_double(randn(device, shape, seed, stddev)), dtype);
}

// The compute dtypes every mixed-precision test runs over, and their names for test-parameter labels.
inline std::vector<DType> compute_dtypes() { return {DType::F32, DType::BF16, DType::F16}; }
inline std::string dtype_label(const ::testing::TestParamInfo<DType>& p) { return dtype_name(p.param); }

// Bound on rel_error for a result formed in fp32 and rounded once to `dtype`, against float64 on the same (already
// rounded) inputs. Rounding to nearest costs at most the unit roundoff u per element, so rel_error <= u:
// u = 2^-8 = 3.9e-3 for bf16 and 2^-11 = 4.9e-4 for f16 (measured: 0.3u to 0.5u on every op here). The bounds,
// 1e-2 (2.5u) and 2e-3 (4u), leave room for ops that also read a rounded intermediate (attention backward reads
// the rounded y). f32 results keep `f32_bound`, the bound of the existing fp32 test of the same op.
inline double tolerance(DType dtype, double f32_bound) {
  switch (dtype) {
    case DType::BF16:
      return 1e-2;
    case DType::F16:
      return 2e-3;
    default:
      return f32_bound;
  }
}

using DoubleFn = std::function<std::vector<double>(const std::vector<double>&)>;

// dL/dx for L(x) = sum(w * f(x)), by central differences. With h = 1e-6 in double, truncation (~h^2) and
// rounding (~1e-16 / h) errors are both around 1e-10, far below the fp32 error of the op under test.
inline std::vector<double> numeric_grad(const DoubleFn& f, std::vector<double> x, const std::vector<double>& w,
                                        double h = 1e-6) {
  auto loss = [&](const std::vector<double>& at) {
    const std::vector<double> y = f(at);
    double l = 0.0;
    for (size_t i = 0; i < y.size(); ++i) l += w[i] * y[i];
    return l;
  };
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss(x);
    x[i] = keep - h;
    const double down = loss(x);
    x[i] = keep;
    grad[i] = (up - down) / (2.0 * h);
  }
  return grad;
}

// Restores the OpenMP thread count when a test that changes it ends, so later tests run as configured.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(omp_get_max_threads()) {}
  ~ThreadCountGuard() { omp_set_num_threads(saved_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_;
};

}  // namespace tandem::testing
