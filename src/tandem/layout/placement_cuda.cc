// Placement in a build with the CUDA backend: a GPU per process when there are GPUs, NCCL groups between them.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstdio>

#include "tandem/comm/nccl/nccl_communicator.h"
#include "tandem/core/error.h"
#include "tandem/core/units.h"
#include "tandem/device/cuda/cuda_check.h"
#include "tandem/device/cuda/cuda_device.h"
#include "tandem/layout/placement.h"

namespace tandem::layout {

std::unique_ptr<device::AccountedDevice> make_device(const std::string& choice, int local_rank) {
  if (choice != "auto" && choice != "cpu" && choice != "cuda")
    TANDEM_FAIL("--device '", choice, "': use auto, cpu or cuda");
  if (choice == "cpu") return nullptr;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) {
    cudaGetLastError();
    gpus = 0;
  }
  if (gpus > 0) return std::make_unique<device::CudaDevice>(local_rank % gpus);
  if (choice == "cuda") TANDEM_FAIL("--device cuda: no GPU is visible to this process");
  return nullptr;
}

Groups make_job_groups(comm::mpi::MpiWorld* world, const Layout& layout, device::AccountedDevice* gpu) {
  if (!world) return make_single_process_groups();
  if (!gpu) return make_groups(*world, layout);
  return make_nccl_groups(*world, layout, static_cast<device::CudaDevice&>(*gpu));
}

GpuReport gpu_report() {
  GpuReport r;
  char line[512];
  int runtime = 0, driver = 0, nccl = 0;
  TANDEM_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  TANDEM_CUDA_CHECK(cudaDriverGetVersion(&driver));
  comm::nccl::check_nccl(ncclGetVersion(&nccl), "ncclGetVersion", "this process");
  const size_t cudnn = cudnnGetVersion();
  std::snprintf(line, sizeof line, "CUDA backend: runtime %d.%d, cuDNN %zu.%zu.%zu, NCCL %d.%d.%d; ", runtime / 1000,
                runtime % 1000 / 10, cudnn / 10000, cudnn % 10000 / 100, cudnn % 100, nccl / 10000, nccl % 10000 / 100,
                nccl % 100);
  r.text += line;
  if (driver > 0) {
    std::snprintf(line, sizeof line, "the driver supports CUDA %d.%d\n", driver / 1000, driver % 1000 / 10);
    r.text += line;
  } else {
    r.text += "no NVIDIA driver\n";
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    r.text += std::string("GPUs: none usable (") + cudaGetErrorString(e) + ")\n";
    cudaGetLastError();
    count = 0;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    std::snprintf(line, sizeof line, "  cuda:%d %s, %s, %d SMs, compute capability %d.%d\n", i, p.name,
                  format_bytes(p.totalGlobalMem).c_str(), p.multiProcessorCount, p.major, p.minor);
    r.text += line;
    if (p.major >= 8) ++r.usable;  // bf16 tensor cores: Ampere and later
  }
  return r;
}

}  // namespace tandem::layout
