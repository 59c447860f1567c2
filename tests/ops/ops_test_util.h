// Helpers for the op tests: random tensors on a CpuDevice, tensors from double vectors, and central finite
// differences of a double-precision reference forward.
#pragma once

#include <omp.h>

#include <cstring>
#include <functional>
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
