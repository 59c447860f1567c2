// The main() of every test binary that runs under mpirun (tandem_mpi_test in tests/CMakeLists.txt): it starts
// MPI once for the whole binary, checks the process count and keeps gtest's output to rank 0.
#pragma once

#include "tandem/comm/mpi/mpi_world.h"

namespace tandem::testing {

// The MPI session of this test binary; it outlives every test.
comm::mpi::MpiWorld& mpi_world();

}  // namespace tandem::testing
