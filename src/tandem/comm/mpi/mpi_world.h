// MpiWorld: the process's MPI session (init and finalize), the world communicator, the shared progress
// table and the watchdog timeout; it makes the communicators of sub-groups. One per process, owned by
// main() or the test, passed down explicitly.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "tandem/comm/communicator.h"
#include "tandem/comm/mpi/progress_table.h"

namespace tandem::comm::mpi {

class MpiWorld {
 public:
  // Initialises MPI unless it is already; finalizes in the destructor if it initialised it.
  // `timeout_s`: how long one operation may wait before the watchdog aborts the job.
  MpiWorld(int* argc, char*** argv, double timeout_s = 300);
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double t) { timeout_s_ = t; }

  // Every rank calls with its color; ranks of one color form a group ordered by key. `name` must be the
  // same on every member (it identifies the group in watchdog messages). A negative color: this rank joins no
  // group, and gets null.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name);
  std::unique_ptr<Communicator> world();

  ProgressTable& progress() { return *progress_; }
  // Prints the message on stderr (unless empty) and ends every rank of the job with exit code `code`.
  [[noreturn]] void abort(const std::string& message, int code = 3);

 private:
  bool initialised_here_ = false;
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  std::unique_ptr<ProgressTable> progress_;
};

// True when this process was started by mpirun/mpiexec (Open MPI, MPICH or Slurm variables).
bool launched_by_mpi();

}  // namespace tandem::comm::mpi
