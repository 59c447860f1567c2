// Storage element types of the CPU kernels. Kernels are templates over the storage type T of their compute-dtype
// tensors (float, Bf16 or F16) and do all math in fp32: load() widens one element, store() rounds once (nearest
// even, as core/dtype.h). The f32 instantiation compiles to plain float loads and stores.
#pragma once

#include <cstdint>

#include "tandem/core/dtype.h"
#include "tandem/core/tensor.h"

namespace tandem::ops::cpu {

// 16-bit storage tags: distinct types, so overloads and templates tell bf16 from f16 bits.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const Bf16* p, int64_t i) { return bf16_to_f32(p[i].bits); }
inline float load(const F16* p, int64_t i) { return f16_to_f32(p[i].bits); }

inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(Bf16* p, int64_t i, float v) { p[i].bits = f32_to_bf16(v); }
inline void store(F16* p, int64_t i, float v) { p[i].bits = f32_to_f16(v); }

// v rounded to the storage type T and widened again: what a store then a load gives.
// Attention's backward: out[i] = sum_j a[i d + j] b[i d + j] for each of `rows` rows of d (rowsum(dO * O), the D_i of
// dS = P (dP - D_i)), summed in column order.
inline void row_dots(const float* a, const float* b, int64_t rows, int64_t d, float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    float acc = 0.0f;
    for (int64_t j = 0; j < d; ++j) acc += a[i * d + j] * b[i * d + j];
    out[i] = acc;
  }
}

template <class T>
inline float rounded(float v) {
  T t[1];
  store(t, 0, v);
  return load(t, 0);
}

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<Bf16>() {
  return DType::BF16;
}
template <>
constexpr DType dtype_of<F16>() {
  return DType::F16;
}

// A tensor's elements as T. ops.cc has validated the dtypes; the check catches a backend picking the wrong T.
template <class T>
T* elems(const Tensor& t) {
  TANDEM_CHECK(t.dtype() == dtype_of<T>(), "CPU kernel for ", dtype_name(dtype_of<T>()), " given a ",
               dtype_name(t.dtype()), " tensor");
  return static_cast<T*>(t.raw());
}

// Calls fn(T{}) with the storage type T of float dtype `t`; the kernel reads it back as decltype of its argument.
template <class Fn>
decltype(auto) visit_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32:
      return fn(float{});
    case DType::BF16:
      return fn(Bf16{});
    case DType::F16:
      return fn(F16{});
    case DType::I32:
    case DType::E4M3:
    case DType::E5M2:
      break;
  }
  TANDEM_FAIL("CPU kernel: ", dtype_name(t), " is not a float dtype");
}

}  // namespace tandem::ops::cpu
