// Placement in a build without the CUDA backend: every process trains on its CPU.
#include "tandem/core/error.h"
#include "tandem/layout/placement.h"

namespace tandem::layout {

std::unique_ptr<device::AccountedDevice> make_device(const std::string& choice, int) {
  if (choice != "auto" && choice != "cpu" && choice != "cuda")
    TANDEM_FAIL("--device '", choice, "': use auto, cpu or cuda");
  if (choice == "cuda") TANDEM_FAIL("--device cuda: this build has no CUDA backend (the toolkit was not found)");
  return nullptr;
}

Groups make_job_groups(comm::mpi::MpiWorld* world, const Layout& layout, device::AccountedDevice*) {
  return world ? make_groups(*world, layout) : make_single_process_groups();
}

GpuReport gpu_report() {
  return {"CUDA backend: not built (the CUDA toolkit was not found when this binary was configured)\n", 0};
}

}  // namespace tandem::layout
