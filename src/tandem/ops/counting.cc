// The counting backend: every op of op_list.h on a CountingDevice runs nothing. It allocates (and frees at once)
// the scratch the planned backend's kernel would, takes that backend's fixed workspaces with the first op, and adds
// the op's work (work.h) to the device's WorkLog: FLOPs of matrix products and attention, bytes read and written by
// the rest.
#include <algorithm>
#include <tuple>

#include "tandem/device/counting_device.h"
#include "tandem/ops/backend.h"
#include "tandem/ops/op_util.h"
#include "tandem/ops/work.h"

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

// The op's work (work.h) added to the device's log.
template <OpId id, class... A>
void record(device::WorkLog& w, const A&... a) {
  const OpWork k = work_of<id>(a...);
  w.ops += 1;
  w.gemm_flops += k.gemm_flops;
  w.gemm_flops_fp32 += k.gemm_flops_fp32;
  w.gemm_flops_fp8 += k.gemm_flops_fp8;
  w.grouped_flops += k.grouped_flops;
  w.attention_flops += k.attention_flops;
  w.attention_backward_flops += k.attention_backward_flops;
  w.attention_weighted_flops += k.attention_weighted_flops;
  w.attention_weighted_backward_flops += k.attention_weighted_backward_flops;
  w.bytes += k.bytes;
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
    const int64_t bytes = fn(ScratchContext{d.cpu_threads(), d.planned_device()}, a...);
    if (bytes > 0) d.release(d.allocate(static_cast<size_t>(bytes), "op scratch"), static_cast<size_t>(bytes));
  }
  record<id>(d.work(), a...);
}

// What an op that returns a host value gives on the counting device, which holds no values: R's default, except the
// rows per expert, where the planner assumes balanced routing (ops.h, moe_expert_rows): the M rows spread evenly, the
// first M mod E experts taking one more.
template <OpId id, class R, class... A>
R counted_result(const A&... a) {
  if constexpr (id == OpId::moe_expert_rows) {
    const auto& [offsets, rows] = std::tie(a...);
    const int64_t experts = offsets.numel() - 1;
    R out(static_cast<size_t>(experts), rows / experts);
    for (int64_t j = 0; j < rows % experts; ++j) ++out[static_cast<size_t>(j)];
    return out;
  } else {
    return R();
  }
}

#define TANDEM_OP_COUNT(R, name, params, args)                    \
  R name params {                                                 \
    count<OpId::name>(&Scratch::name, TANDEM_OP_UNPAREN args);    \
    return counted_result<OpId::name, R>(TANDEM_OP_UNPAREN args); \
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
