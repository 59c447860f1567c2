#include "tandem/comm/mpi/mpi_world.h"

#include <cstdio>
#include <cstdlib>

#include "tandem/comm/mpi/mpi_communicator.h"
#include "tandem/core/error.h"

namespace tandem::comm::mpi {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(v)) return true;
  return false;
}

MpiWorld::MpiWorld(int* argc, char*** argv, double timeout_s) : timeout_s_(timeout_s) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    initialised_here_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  // Errors return codes (checked and turned into messages) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  progress_ = std::make_unique<ProgressTable>(MPI_COMM_WORLD);
}

MpiWorld::~MpiWorld() {
  progress_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (initialised_here_ && !finalized) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiWorld::split(int color, int key, const std::string& name) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, key, &comm), "MPI_Comm_split", name);
  if (comm == MPI_COMM_NULL) return nullptr;  // not a member
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::make_unique<MpiCommunicator>(*this, comm, name);
}

std::unique_ptr<Communicator> MpiWorld::world() { return split(0, rank_, "world"); }

void MpiWorld::abort(const std::string& message, int code) {
  if (!message.empty()) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
  }
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace tandem::comm::mpi
