#include "mpi_test_main.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "test_subset.h"

namespace tandem::testing {
namespace {
comm::mpi::MpiWorld* world = nullptr;  // set by main()
}  // namespace

comm::mpi::MpiWorld& mpi_world() { return *world; }

}  // namespace tandem::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tandem::comm::mpi::MpiWorld world(&argc, &argv, 120);
  tandem::testing::world = &world;
  if (world.size() != TANDEM_TEST_WORLD) {
    std::fprintf(stderr, "this test must run under mpirun -np %d (got %d processes)\n", TANDEM_TEST_WORLD,
                 world.size());
    return 2;
  }
  if (world.rank() == 0)
    for (const std::string& line : tandem::testing::left_out_report()) std::printf("%s\n", line.c_str());
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
