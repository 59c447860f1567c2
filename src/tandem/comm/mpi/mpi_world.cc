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
  check_mpi(MPI_Initialized(&initialised), "MPI_Initialized", "world");
  if (!initialised) {
    int provided = 0;
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", "world");
    initialised_here_ = true;
    TANDEM_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI_Init_thread: this MPI gives thread level ", provided,
                 ", below MPI_THREAD_FUNNELED, which Tandem's communication thread needs");
  }
  // Errors return codes (checked and turned into messages) instead of aborting inside MPI.
  check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", "world");
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank", "world");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size", "world");
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
  check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", name);
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
