// The CUDA backend of the op set: every op of op_list.h with the contracts of tandem/ops/ops.h on tensors of a
// CudaDevice, shapes already checked by ops.cc. Dtypes follow the mixed-precision rules of ops.h: X is f32, bf16
// or f16; math is fp32 inside every kernel. Everything is queued on the device's compute stream; nothing waits for
// the GPU except sum_squares and sum_squares_total (which also raise any deferred kernel error).
// Bad ids or targets (out of range) cannot throw from a kernel: they are reported through the device's deferred-error
// slot and thrown by the next CudaDevice::synchronize(), copy_to_host(), sum_squares() or sum_squares_total(); the
// kernel writes zeros (embedding), skips the row (embedding backward) or writes NaN (cross-entropy losses) for them
// meanwhile.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"
#include "tandem/ops/backend.h"
#include "tandem/ops/ops.h"

namespace tandem::ops::cuda {

#define TANDEM_OP_DECLARE(R, name, params, args) R name params;
TANDEM_OPS(TANDEM_OP_DECLARE)
#undef TANDEM_OP_DECLARE

}  // namespace tandem::ops::cuda
