// The counting backend: every op of op_list.h on a CountingDevice runs nothing. It allocates (and frees at once)
// the scratch the planned backend's kernel would, takes that backend's fixed workspaces with the first op, and adds
// the op's work to the device's WorkLog: FLOPs of matrix products and attention, bytes read and written by the rest.
#include <algorithm>

#include "tandem/device/counting_device.h"
#include "tandem/ops/backend.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops {

const char* op_name(OpId id) {
  static const char* const names[] = {
#define TANDEM_OP_NAME(R, name, params, args) #name,
      TANDEM_OPS(TANDEM_OP_NAME)
#undef TANDEM_OP_NAME
  };
  return names[static_cast<size_t>(id)];
}

namespace counting {
namespace {

double tensor_bytes(const Tensor& t) { return t.defined() ? static_cast<double>(t.nbytes()) : 0.0; }
template <class T>
double tensor_bytes(const T&) {
  return 0.0;
}

const Tensor* tensor_ptr(const Tensor& t) { return &t; }
template <class T>
const Tensor* tensor_ptr(const T&) {
  return nullptr;
}
template <class... A>
const Tensor* first_tensor(const A&... a) {
  const Tensor* t = nullptr;
  ((t = t ? t : tensor_ptr(a)), ...);
  return t;
}

// Causal attention on qkv (B, T, 3C): q k^T and p v, B H T^2 D multiply-adds each, half of them masked.
double attention_forward_flops(const Tensor& qkv) {
  const double b = static_cast<double>(qkv.dim(0)), t = static_cast<double>(qkv.dim(1));
  return 2.0 * b * t * t * static_cast<double>(qkv.dim(2) / 3);
}

// The op's work: products and attention by their FLOPs, AdamW by the 28 bytes per element it moves (reads value,
// gradient and moments, writes value and moments), every other op by the bytes of its tensors, each read or
// written once.
template <OpId id, class... A>
void record(device::WorkLog& w, const A&... a) {
  w.ops += 1;
  if constexpr (id == OpId::matmul) {
    const auto& [x, y, c, trans_a, trans_b, beta] = std::tie(a...);
    const double m = static_cast<double>(rows_of(c)), n = static_cast<double>(cols_of(c));
    const double k = static_cast<double>(trans_a ? rows_of(x) : cols_of(x));
    (x.dtype() == DType::F32 ? w.gemm_flops_fp32 : w.gemm_flops) += 2.0 * m * n * k;
  } else if constexpr (id == OpId::attention_forward) {
    w.attention_flops += attention_forward_flops(std::get<0>(std::tie(a...)));
  } else if constexpr (id == OpId::attention_backward) {
    // dV, dP, dQ, dK and the recomputed scores: 2.5 times the forward's products.
    w.attention_flops += 2.5 * attention_forward_flops(std::get<0>(std::tie(a...)));
  } else if constexpr (id == OpId::adamw_step) {
    w.bytes += 28.0 * static_cast<double>(std::get<0>(std::tie(a...)).numel());
  } else {
    w.bytes += (0.0 + ... + tensor_bytes(a));
  }
}

template <OpId id, class Fn, class... A>
void count(Fn Scratch::*entry, const A&... a) {
  const Tensor* t = first_tensor(a...);
  TANDEM_CHECK(t && t->defined(), op_name(id), " on the counting backend without a tensor");
  device::CountingDevice& d = *device::as_counting(t->device());
  const Scratch& s = d.planned() == DeviceKind::Cuda ? cuda::scratch() : cpu::scratch();
  const PurposeScope scope(d, MemoryPurpose::Transient);
  if (s.fixed > 0 && d.take_fixed_once()) {
    const PurposeScope fixed(d, MemoryPurpose::Other);
    d.allocate(static_cast<size_t>(s.fixed), "fixed workspaces");  // kept for the device's life
  }
  if (const auto fn = s.*entry) {
    const int64_t bytes = fn(ScratchContext{d.cpu_threads()}, a...);
    if (bytes > 0) d.release(d.allocate(static_cast<size_t>(bytes), "op scratch"), static_cast<size_t>(bytes));
  }
  record<id>(d.work(), a...);
}

#define TANDEM_OP_COUNT(R, name, params, args)                 \
  R name params {                                              \
    count<OpId::name>(&Scratch::name, TANDEM_OP_UNPAREN args); \
    return R();                                                \
  }
TANDEM_OPS(TANDEM_OP_COUNT)
#undef TANDEM_OP_COUNT

}  // namespace

const Backend& backend() {
#define TANDEM_OP_ENTRY(R, name, params, args) .name = &counting::name,
  static const Backend table{.name = "counting", TANDEM_OPS(TANDEM_OP_ENTRY)};
#undef TANDEM_OP_ENTRY
  return table;
}

}  // namespace counting
}  // namespace tandem::ops
