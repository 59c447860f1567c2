#include "info_command.h"

#include <mpi.h>
#include <omp.h>

#include <cstdio>

#include "tandem/core/units.h"

#ifdef TANDEM_WITH_CUDA
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>
#endif

namespace tandem::app {

int run_info_command() {
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi(mpi_version, static_cast<size_t>(length));
  if (const auto cut = mpi.find_first_of(",\n"); cut != std::string::npos) mpi.resize(cut);
  std::printf("MPI: %s\n", mpi.c_str());
  std::printf("CPU backend: OpenMP threads %d\n", omp_get_max_threads());
  int usable = 0;
#ifdef TANDEM_WITH_CUDA
  int runtime = 0, driver = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  ncclGetVersion(&nccl);
  const size_t cudnn = cudnnGetVersion();
  std::printf("CUDA backend: runtime %d.%d, cuDNN %zu.%zu.%zu, NCCL %d.%d.%d; ", runtime / 1000, runtime % 1000 / 10,
              cudnn / 10000, cudnn % 10000 / 100, cudnn % 100, nccl / 10000, nccl % 10000 / 100, nccl % 100);
  if (driver > 0)
    std::printf("the driver supports CUDA %d.%d\n", driver / 1000, driver % 1000 / 10);
  else
    std::printf("no NVIDIA driver\n");
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    std::printf("GPUs: none usable (%s)\n", cudaGetErrorString(e));
    count = 0;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    std::printf("  cuda:%d %s, %s, %d SMs, compute capability %d.%d\n", i, p.name,
                format_bytes(p.totalGlobalMem).c_str(), p.multiProcessorCount, p.major, p.minor);
    if (p.major >= 8) ++usable;  // bf16 tensor cores: Ampere and later
  }
#else
  std::printf("CUDA backend: not built (the CUDA toolkit was not found when this binary was configured)\n");
#endif
  std::printf("usable GPUs: %d\n", usable);
  return 0;
}

}  // namespace tandem::app
