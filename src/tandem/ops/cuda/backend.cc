// The CUDA backend's table (backend.h): every op of op_list.h. Its scratch table is in scratch.cc, which every build
// compiles.
#include "tandem/ops/cuda/cuda_ops.h"

namespace tandem::ops::cuda {

const Backend& backend() {
#define TANDEM_OP_ENTRY(R, name, params, args) .name = &cuda::name,
  static const Backend table{.name = "cuda", TANDEM_OPS(TANDEM_OP_ENTRY)};
#undef TANDEM_OP_ENTRY
  return table;
}

}  // namespace tandem::ops::cuda
