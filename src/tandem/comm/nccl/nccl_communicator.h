// NcclCommunicator: the Communicator of one group on CUDA tensors, through NCCL. Bootstrapped over the
// group's MPI communicator (rank 0 makes the NCCL id, MPI broadcasts it), which also carries the scalar
// reductions and barriers. Collectives run on the device's communication stream. Point-to-point messages
// travel on one of two channels chosen by `tag & 1` (the pipeline sends activations on channel 0 and
// gradients on channel 1), each its own NCCL communicator and stream: NCCL pairs a rank's sends with the
// peer's receives in posting order and a send may wait for its receive, so activations and gradients crossing
// between two stages never wait behind each other. Every operation is ordered after the compute queued
// before it, and Request::wait() makes the compute stream wait for it: the host never blocks.
//
// So a hang cannot be caught where the host waits: every operation is handed to an OperationWatchdog, whose
// thread polls its completion event and NCCL's asynchronous error state of the three communicators. Past the
// MPI watchdog's timeout, or at once on an asynchronous error, it prints which operation (name, sequence number,
// group, members) is stuck, aborts the communicators (ncclCommAbort: the stuck kernels end and the host is
// released) and aborts the job like the MPI path (exit code 3). The watchdog itself is tested on the CPU; that
// ncclCommAbort releases a rank blocked in a collective whose peer never arrives only a run on 2 or more GPUs
// can show.
#pragma once

#include <nccl.h>

#include <memory>
#include <string>

#include "tandem/comm/communicator.h"
#include "tandem/comm/operation_watchdog.h"
#include "tandem/device/cuda/cuda_device.h"

namespace tandem::comm::mpi {
class MpiWorld;
}

namespace tandem::comm::nccl {

// Throws Error naming the call, the group and NCCL's text when `code` is not ncclSuccess.
void check_nccl(ncclResult_t code, const char* call, const std::string& group);

class NcclCommunicator final : public Communicator {
 public:
  // Every member calls this with its MPI communicator of the same group. `world` gives the watchdog its timeout
  // (read now) and ends the job when it fires.
  NcclCommunicator(std::unique_ptr<Communicator> mpi, device::CudaDevice& device, mpi::MpiWorld& world);
  // Stops the watchdog, then destroys the NCCL communicators.
  ~NcclCommunicator() override;

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  const std::string& name() const override { return mpi_->name(); }
  const std::vector<int>& world_ranks() const override { return mpi_->world_ranks(); }

  std::unique_ptr<Request> all_reduce_async(const Tensor& t, ReduceOp op) override;
  std::unique_ptr<Request> reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override;
  std::unique_ptr<Request> all_gather_async(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<Request> broadcast_async(const Tensor& t, int root) override;
  std::unique_ptr<Request> all_to_all_async(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<Request> all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send, const Tensor& out,
                                              const std::vector<int64_t>& recv) override;
  std::unique_ptr<Request> send_async(const Tensor& t, int peer, int tag) override;
  std::unique_ptr<Request> recv_async(const Tensor& t, int peer, int tag) override;
  void barrier() override;
  double all_reduce_scalar(double value, ReduceOp op) override { return mpi_->all_reduce_scalar(value, op); }

 private:
  // Queues `launch` on `stream` after the compute queued so far, under the watchdog as operation `op` (an
  // mpi::OpCode) of NCCL communicator `which` (0: collectives, 1 + c: channel c), `detail` naming the peer;
  // returns the request that joins it back.
  std::unique_ptr<Request> enqueue(int32_t op, int which, std::string detail, cudaStream_t stream,
                                   const std::vector<Tensor>& keep_alive, const std::function<void()>& launch);
  // Empty while the NCCL communicators are healthy; else NCCL's asynchronous error, naming the communicator.
  std::string async_error() const;
  // The watchdog's action: prints `message`, aborts the NCCL communicators and then the job.
  [[noreturn]] void abort_job(const std::string& message);
  // Point-to-point detail for the watchdog's message: the peer's world rank and the tag.
  std::string p2p_detail(const char* direction, int peer, int tag) const;

  std::unique_ptr<Communicator> mpi_;
  device::CudaDevice& device_;
  mpi::MpiWorld& world_;
  ncclComm_t comm_ = nullptr;
  ncclComm_t channel_comm_[2] = {nullptr, nullptr};
  cudaStream_t channel_stream_[2] = {nullptr, nullptr};
  // The next sequence number on each NCCL communicator (collectives, channel 0, channel 1): the collectives'
  // agree between the members, as the MPI path's do.
  int64_t seq_[3] = {0, 0, 0};
  // Started once the communicators exist; stopped first in the destructor.
  std::unique_ptr<OperationWatchdog> watchdog_;
};

}  // namespace tandem::comm::nccl
