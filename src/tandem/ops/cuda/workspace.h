// Sizes the CUDA kernels' scratch is made of, shared by the kernels and by scratch.cc (which every build compiles, so
// the planner can plan GPUs without the CUDA toolkit). Plain C++: no CUDA header.
#pragma once

#include <cstdint>

namespace tandem::ops::cuda {

// cuBLASLt's workspace: one per device, allocated with its first matmul and kept.
inline constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;

}  // namespace tandem::ops::cuda
