// Backend: one implementation of the op set (op_list.h) as a table of function pointers, and the scratch its
// kernels allocate, declared by each backend next to its kernels. ops.cc dispatches every op through the table of
// the tensors' device kind: ops/cpu, ops/cuda, or the counting backend (ops/counting.cc), which runs nothing and
// records each op and the scratch of the backend its device plans for.
#pragma once

#include <cstdint>

#include "tandem/ops/op_list.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {

struct Backend {
  const char* name;  // "cpu", "cuda", "counting"
#define TANDEM_OP_FIELD(R, name, params, args) R(*name) params;
  TANDEM_OPS(TANDEM_OP_FIELD)
#undef TANDEM_OP_FIELD
};

// What an op's scratch depends on besides its arguments.
struct ScratchContext {
  int cpu_threads = 1;  // OpenMP threads of the process (the CPU attention keeps scratch per thread)
  // The device the plan is for, when the planning process has it (the run's own preflight): the CUDA attention
  // asks cuDNN there for its graphs' workspace. Null otherwise.
  Device* planned_device = nullptr;
};

// Bytes of scratch an op allocates (and frees before returning) on a backend, from its arguments; null for an op
// that allocates none. `fixed` is what a device of the backend keeps once it has run ops (workspaces it allocates
// once and reuses). The kernels size their scratch with the same functions.
#define TANDEM_OP_UNPAREN(...) __VA_ARGS__
struct Scratch {
#define TANDEM_OP_FIELD(R, name, params, args) \
  int64_t (*name)(const ScratchContext& ctx, TANDEM_OP_UNPAREN params) = nullptr;
  TANDEM_OPS(TANDEM_OP_FIELD)
#undef TANDEM_OP_FIELD
  int64_t fixed = 0;
};

// Every op by number, in list order: what the counting device records.
enum class OpId {
#define TANDEM_OP_ID(R, name, params, args) name,
  TANDEM_OPS(TANDEM_OP_ID)
#undef TANDEM_OP_ID
};
const char* op_name(OpId id);

namespace cpu {
const Backend& backend();
const Scratch& scratch();
}  // namespace cpu
namespace cuda {
const Backend& backend();  // only in builds with the CUDA backend
const Scratch& scratch();  // in every build: the planner plans GPUs anywhere
}  // namespace cuda
namespace counting {
const Backend& backend();
}

}  // namespace tandem::ops
