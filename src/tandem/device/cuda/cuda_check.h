// Error checks for CUDA runtime, cuBLAS(Lt) and cuDNN calls: each failure throws tandem::Error naming the call,
// its file:line and the library's own description. The cuBLAS and cuDNN macros expand to calls into those
// libraries, so a file using them includes <cublasLt.h> or <cudnn.h> itself.
#pragma once

#include <cuda_runtime_api.h>

namespace tandem::device {

// Throws Error("<library> call <call> failed at <file>:<line>: <description>").
[[noreturn]] void throw_library_error(const char* library, const char* call, const char* file, int line,
                                      const char* description);

}  // namespace tandem::device

#define TANDEM_CUDA_CHECK(call)                                                       \
  do {                                                                                \
    const cudaError_t tandem_cuda_status_ = (call);                                   \
    if (tandem_cuda_status_ != cudaSuccess)                                           \
      ::tandem::device::throw_library_error("CUDA", #call, __FILE__, __LINE__,        \
                                            cudaGetErrorString(tandem_cuda_status_)); \
  } while (0)

// After a kernel launch: a bad configuration shows up here; a fault inside the kernel shows up at the next sync.
#define TANDEM_CUDA_CHECK_LAUNCH() TANDEM_CUDA_CHECK(cudaGetLastError())

#define TANDEM_CUBLAS_CHECK(call)                                                            \
  do {                                                                                       \
    const cublasStatus_t tandem_cublas_status_ = (call);                                     \
    if (tandem_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                      \
      ::tandem::device::throw_library_error("cuBLAS", #call, __FILE__, __LINE__,             \
                                            cublasLtGetStatusString(tandem_cublas_status_)); \
  } while (0)

#define TANDEM_CUDNN_CHECK(call)                                                        \
  do {                                                                                  \
    const cudnnStatus_t tandem_cudnn_status_ = (call);                                  \
    if (tandem_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                   \
      ::tandem::device::throw_library_error("cuDNN", #call, __FILE__, __LINE__,         \
                                            cudnnGetErrorString(tandem_cudnn_status_)); \
  } while (0)
