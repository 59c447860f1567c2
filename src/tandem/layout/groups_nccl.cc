// The NCCL flavour of Groups: each MPI group wrapped in a NcclCommunicator on the rank's GPU, watched with the
// world's timeout.
#include "tandem/comm/nccl/nccl_communicator.h"
#include "tandem/layout/groups.h"

namespace tandem::layout {

Groups make_nccl_groups(comm::mpi::MpiWorld& world, const Layout& layout, device::CudaDevice& gpu) {
  Groups g = make_groups(world, layout);
  auto wrap = [&](std::unique_ptr<comm::Communicator>& c) {
    c = std::make_unique<comm::nccl::NcclCommunicator>(std::move(c), gpu, world);
  };
  wrap(g.world);
  wrap(g.tp);
  wrap(g.pp);
  wrap(g.dp);
  wrap(g.cp);
  if (g.tied) wrap(g.tied);
  if (g.ep) wrap(g.ep);
  if (g.edp) wrap(g.edp);
  return g;
}

}  // namespace tandem::layout
