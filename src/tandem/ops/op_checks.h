// The op front end's checks (ops.cc, ops_llama.cc): devices, dtypes, shapes and overlaps of a call's tensors, and the
// backend of a device kind. Internal to ops/; every message names the op and the tensor.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "tandem/ops/backend.h"
#include "tandem/ops/op_util.h"
#include "tandem/ops/profile.h"

namespace tandem::ops::checks {

[[noreturn]] inline void no_backend(const char* op, const Tensor& t) {
  TANDEM_FAIL(op, " has no implementation for device ", t.device().name(),
              " in this build (the CUDA backend is built when the CUDA toolkit is found)");
}

// Every tensor of one call must be defined and on the same kind of device, since the backend is picked from
// the first one and reads all of them through that backend's pointers.
template <class... Rest>
inline void check_devices(const char* op, const Tensor& first, const Rest&... rest) {
  TANDEM_CHECK(first.defined(), op, ": undefined tensor");
  const DeviceKind kind = first.device().kind();
  [[maybe_unused]] auto same = [&](const Tensor& t) {
    TANDEM_CHECK(t.defined(), op, ": undefined tensor");
    TANDEM_CHECK(t.device().kind() == kind, op, ": tensors on ", first.device().name(), " and ", t.device().name());
  };
  (same(rest), ...);
}

// The backend of `t`'s device kind; every call names the same function of each (op_list.h). While the op profile is
// on (profile.h), CPU and CUDA calls go through its timed tables.
inline const Backend& backend_of(const char* op, const Tensor& t) {
  switch (t.device().kind()) {
    case DeviceKind::Cpu:
      return profile::enabled() ? profile::cpu_backend() : cpu::backend();
    case DeviceKind::Cuda:
#ifdef TANDEM_WITH_CUDA
      return profile::enabled() ? profile::cuda_backend() : cuda::backend();
#else
      break;
#endif
    case DeviceKind::Counting:
      return counting::backend();
  }
  no_backend(op, t);
}

inline void check_dtype(const char* op, const char* name, const Tensor& t, DType want) {
  TANDEM_CHECK(t.dtype() == want, op, ": ", name, " ", shape_str(t.shape()), " holds ", dtype_name(t.dtype()),
               ", expected ", dtype_name(want));
}
inline void check_f32(const char* op, const char* name, const Tensor& t) { check_dtype(op, name, t, DType::F32); }

inline bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

using Named = std::pair<const char*, const Tensor&>;

// "a", "a and b", "a, b and c": the tensors a message is about.
inline std::string names_of(std::initializer_list<Named> tensors) {
  std::string out;
  size_t i = 0;
  for (const auto& [name, t] : tensors) {
    if (i > 0) out += i + 1 == tensors.size() ? " and " : ", ";
    out += name;
    ++i;
  }
  return out;
}

// The op's compute dtype X (ops.h): a float dtype that every listed tensor holds. Returns it.
inline DType check_compute(const char* op, std::initializer_list<Named> tensors) {
  const auto& [first_name, first] = *tensors.begin();
  const DType x = first.dtype();
  TANDEM_CHECK(is_float(x), op, ": ", first_name, " ", shape_str(first.shape()), " holds ", dtype_name(x),
               ", not a compute dtype (f32, bf16 or f16)");
  for (const auto& [name, t] : tensors)
    TANDEM_CHECK(t.dtype() == x, op, ": ", name, " ", shape_str(t.shape()), " holds ", dtype_name(t.dtype()), " but ",
                 first_name, " holds ", dtype_name(x), "; ", names_of(tensors), " must share one compute dtype");
  return x;
}

inline void check_same_shape(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b) {
  TANDEM_CHECK(a.shape() == b.shape(), op, ": ", name_a, " ", shape_str(a.shape()), " and ", name_b, " ",
               shape_str(b.shape()), " differ in shape");
}

// A channel vector (C) matching the last dim of a (N, C) tensor.
inline void check_channels(const char* op, const char* name, const Tensor& v, const Tensor& rows) {
  TANDEM_CHECK(v.rank() == 1 && v.dim(0) == cols_of(rows), op, ": ", name, " ", shape_str(v.shape()),
               " does not match the last dim of ", shape_str(rows.shape()));
}

// A per-row vector (N) of a (N, C) tensor; any shape of N elements is accepted, e.g. (B, T) for (B, T, C).
inline void check_per_row(const char* op, const char* name, const Tensor& v, const Tensor& rows) {
  TANDEM_CHECK(v.numel() == rows_of(rows), op, ": ", name, " ", shape_str(v.shape()), " needs one element per row of ",
               shape_str(rows.shape()));
}

inline bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const char* a0 = static_cast<const char*>(a.raw());
  const char* b0 = static_cast<const char*>(b.raw());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

}  // namespace tandem::ops::checks
