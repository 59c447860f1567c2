// What the product plans of one device asked cuBLASLt for (gemm.cc): how many carry the bias epilogue of
// linear_forward or the bias-gradient epilogue of linear_weight_grad, and how many of those cuBLASLt had no
// algorithm for (their ops then run the product and the bias pass separately). For bench/gpu/ops_check's report.
#pragma once

#include <cstdint>

#include "tandem/device/cuda/cuda_device.h"

namespace tandem::ops::cuda {

struct EpilogueCounts {
  int64_t bias = 0, bias_grad = 0;  // plans with each epilogue, supported or not
  int64_t unsupported = 0;          // of those, the ones that fall back
};
EpilogueCounts epilogue_counts(device::CudaDevice& dev);

}  // namespace tandem::ops::cuda
