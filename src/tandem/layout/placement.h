// Where a process of a job runs: the device it trains on and the groups it talks through, and what GPU backend the
// build has. The one place that knows whether CUDA was built: placement_cuda.cc with it, placement_cpu.cc without
// (the build picks one), so callers never branch on it.
#pragma once

#include <memory>
#include <string>

#include "tandem/comm/mpi/mpi_world.h"
#include "tandem/device/accounted_device.h"
#include "tandem/layout/groups.h"

namespace tandem::layout {

// The GPU this process trains on, or null for the CPU. `choice`: "cpu"; "cuda" (a GPU, or an Error saying why
// there is none); "auto" (a GPU when one is visible). With several GPUs, process `local_rank` of its node takes GPU
// local_rank % count.
std::unique_ptr<device::AccountedDevice> make_device(const std::string& choice, int local_rank);

// The groups of `layout` for this process: itself alone without `world`; over MPI with CPU tensors; over NCCL,
// bootstrapped by MPI, when `gpu` is a GPU from make_device.
Groups make_job_groups(comm::mpi::MpiWorld* world, const Layout& layout, device::AccountedDevice* gpu);

// The GPU backend's lines for `tandem info` (library versions, each GPU), and how many GPUs can train (bf16 tensor
// cores).
struct GpuReport {
  std::string text;
  int usable = 0;
};
GpuReport gpu_report();

}  // namespace tandem::layout
