// The experts' grouped products on CUDA by path (grouped_path.h says which and why): the per-expert loop of
// cuBLASLt products (gemm.cc) and one cublasGemmGroupedBatchedEx call (grouped_gemm.cu). The ops take the rule's
// path; ops_check names each path to compare them with the CPU op and with each other. Host code only; no cuBLAS
// type appears here.
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/device/cuda/cuda_device.h"
#include "tandem/ops/cuda/grouped_call.h"
#include "tandem/ops/cuda/grouped_path.h"

namespace tandem::ops::cuda {

// grouped_matmul and grouped_weight_grad (ops.h, shapes checked by ops.cc) on `path`. OneCall throws where cuBLAS's
// grouped call does not take the operands (grouped_call_takes) or no group has rows.
void grouped_matmul_on(GroupedPath path, const Tensor& a, const Tensor& b, const Tensor& c,
                       const std::vector<int64_t>& rows, bool trans_b, float beta);
void grouped_weight_grad_on(GroupedPath path, const Tensor& dy, const Tensor& x, const Tensor& dw,
                            const std::vector<int64_t>& rows);

// Queues the call on the device's compute stream, without asking the rule: a kernel writes the three pointer arrays (3
// x the non-empty groups x 8 bytes, grouped_pointer_bytes, from the device arena) from the bases and the groups' first
// rows passed by value, then cublasGemmGroupedBatchedEx reads them, with one cuBLAS group of one product per non-empty
// expert. Nothing waits for the GPU. cuBLAS runs in its default math mode with reduced-precision reductions disallowed
// (every sum in fp32, rounded once into C), without atomics (the same bits every run), in the cuBLASLt products'
// workspace (gemm_plan.h: one per device, the planner's fixed bytes).
void queue_grouped_call(device::CudaDevice& dev, const GroupedCall& call, const std::vector<int64_t>& rows);

}  // namespace tandem::ops::cuda
