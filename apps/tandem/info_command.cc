#include "info_command.h"

#include <mpi.h>
#include <omp.h>

#include <cstdio>

#include "tandem/layout/placement.h"

namespace tandem::app {

int run_info_command() {
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi(mpi_version, static_cast<size_t>(length));
  if (const auto cut = mpi.find_first_of(",\n"); cut != std::string::npos) mpi.resize(cut);
  std::printf("MPI: %s\n", mpi.c_str());
  std::printf("CPU backend: OpenMP threads %d\n", omp_get_max_threads());
  const layout::GpuReport gpus = layout::gpu_report();
  std::printf("%s", gpus.text.c_str());
  std::printf("usable GPUs: %d\n", gpus.usable);
  return 0;
}

}  // namespace tandem::app
