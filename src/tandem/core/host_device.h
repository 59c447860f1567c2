// TANDEM_HOST_DEVICE: marks an inline function that host code and CUDA device code both compile, so the CPU and the
// GPU compute the same bits with one definition (Philox's rounds, the FP8 scale).
#pragma once

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif
