// Job: the processes of one `tandem train`: this process alone, or the ranks of an MPI job. Setup runs as
// phases that every rank does alike, joined by agreed(), so an error in setup (a bad config, a layout that does
// not fit, a run folder in use) is printed once; after setup an error on one rank is printed by that rank. Either
// way the job ends with exit code 1 on every launcher (an MPI job through MPI_Abort: mpirun returns 0 when all
// ranks merely exit 1 under `tandem train -n`, which lets ranks outlive a dead peer). It owns the MPI session; it
// knows nothing about training.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tandem/comm/communicator.h"
#include "tandem/comm/mpi/mpi_world.h"

namespace tandem::app {

class Job {
 public:
  // Joins the MPI job when this process was started by mpirun/mpiexec; otherwise it is a job of one.
  Job(int* argc, char*** argv);
  ~Job();

  int rank() const { return world_ ? world_->rank() : 0; }
  int size() const { return world_ ? world_->size() : 1; }
  bool printer() const { return rank() == 0; }
  // Null for a job of one.
  comm::mpi::MpiWorld* mpi() { return world_.get(); }

  // Runs `fn` on every rank. When it throws on any rank, the lowest such rank prints "error: <message>" (naming
  // the rank when not every rank failed) and the job ends with exit code 1. A job of one lets the exception
  // through to main(), which prints it.
  void agreed(const std::function<void()>& fn);
  // Runs `fn` on rank 0 only (a decision for the whole job, such as the run folder) and returns its result on
  // every rank; when it throws, rank 0 prints "error: <message>" and the job ends with exit code 1.
  std::string from_rank0(const std::function<std::string()>& fn);
  // The smallest of every rank's `value`.
  double min(double value);
  // Prints "error on rank R: <message>" and ends every rank (a job of one: throws the message instead).
  [[noreturn]] void fail(const std::string& message);
  // For an error every rank raised at the same point (train::AgreedError): rank 0 prints "error: <message>" once
  // and the job ends with exit code 1 (a job of one: throws the message instead).
  [[noreturn]] void fail_agreed(const std::string& message);

 private:
  [[noreturn]] void end_setup_failed();

  std::unique_ptr<comm::mpi::MpiWorld> world_;
  std::unique_ptr<comm::Communicator> setup_;  // the world, for the setup phases' few scalars
};

}  // namespace tandem::app
