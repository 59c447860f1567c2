// Groups: this rank's communicators along each parallel axis of a Layout, as an explicit value.
//   tp: the tensor-parallel slots of one stage of one virtual GPU (neighbouring ranks)
//   cp: the context-parallel shards of one stage of one virtual GPU at one tp slot (attention's all-to-all)
//   pp: the stages of one virtual GPU at one tp slot and context shard
//   dp: the same (stage, tp slot) in every virtual GPU and every context shard: the ZeRO / gradient-reduction group
//       (Layout::replicas() ranks; its rank is dp_rank * cp + cp_rank)
//   tied: the first and last stage of one virtual GPU at one tp slot (tied embedding and head)
//   ep: with expert parallelism (Layout::ep > 1), the ep neighbouring members of a dp group that share out the experts
//       (the tokens' all-to-all; its rank is the expert slot)
//   edp: with expert parallelism, the members of a dp group at the same expert slot, which hold the same experts (their
//        ZeRO / gradient-reduction group)
#pragma once

#include <memory>

#include "tandem/comm/communicator.h"
#include "tandem/comm/mpi/mpi_world.h"
#include "tandem/layout/layout.h"

namespace tandem::device {
class CudaDevice;
}

namespace tandem::layout {

struct Groups {
  Layout layout;
  Coord coord;
  int rank = 0;
  std::unique_ptr<comm::Communicator> world, dp, pp, tp, cp;
  // The first and the last pipeline stage of one virtual GPU at one tp slot and context shard, which both hold a tied
  // parameter's uses (embedding and head): null unless pp > 1 and this rank is on one of them.
  std::unique_ptr<comm::Communicator> tied;
  // The expert-parallel group and the expert slot's replicas: null unless Layout::ep > 1.
  std::unique_ptr<comm::Communicator> ep, edp;
};

// Every rank of the MPI world calls this with the same layout.
Groups make_groups(comm::mpi::MpiWorld& world, const Layout& layout);
// One process, no MPI: every group is this rank alone.
Groups make_single_process_groups();
// World rank `rank` of `layout` played alone: every group a stand-in (comm/stand_in.h) of the layout's sizes.
Groups make_stand_in_groups(const Layout& layout, int rank);

// The same groups as make_groups, each carrying CUDA tensors through NCCL (bootstrapped over its MPI group,
// which still carries scalars). Built only with the CUDA backend.
Groups make_nccl_groups(comm::mpi::MpiWorld& world, const Layout& layout, device::CudaDevice& gpu);

}  // namespace tandem::layout
