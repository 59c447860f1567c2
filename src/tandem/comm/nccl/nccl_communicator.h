// NcclCommunicator: the Communicator of one group on CUDA tensors, through NCCL. Bootstrapped over the
// group's MPI communicator (rank 0 makes the NCCL id, MPI broadcasts it), which also carries the scalar
// reductions and barriers. Collectives run on the device's communication stream. Point-to-point messages
// travel on one of two channels chosen by `tag & 1` (the pipeline sends activations on channel 0 and
// gradients on channel 1), each its own NCCL communicator and stream: NCCL pairs a rank's sends with the
// peer's receives in posting order and a send may wait for its receive, so activations and gradients crossing
// between two stages never wait behind each other. Every operation is ordered after the compute queued
// before it, and Request::wait() makes the compute stream wait for it: the host never blocks.
#pragma once

#include <nccl.h>

#include <memory>

#include "tandem/comm/communicator.h"
#include "tandem/device/cuda/cuda_device.h"

namespace tandem::comm::nccl {

// Throws Error naming the call, the group and NCCL's text when `code` is not ncclSuccess.
void check_nccl(ncclResult_t code, const char* call, const std::string& group);

class NcclCommunicator final : public Communicator {
 public:
  // Every member calls this with its MPI communicator of the same group.
  NcclCommunicator(std::unique_ptr<Communicator> mpi, device::CudaDevice& device);
  ~NcclCommunicator() override;

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  const std::string& name() const override { return mpi_->name(); }
  const std::vector<int>& world_ranks() const override { return mpi_->world_ranks(); }

  std::unique_ptr<Request> all_reduce_async(const Tensor& t, ReduceOp op) override;
  std::unique_ptr<Request> reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override;
  std::unique_ptr<Request> all_gather_async(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<Request> broadcast_async(const Tensor& t, int root) override;
  std::unique_ptr<Request> send_async(const Tensor& t, int peer, int tag) override;
  std::unique_ptr<Request> recv_async(const Tensor& t, int peer, int tag) override;
  void barrier() override;
  double all_reduce_scalar(double value, ReduceOp op) override { return mpi_->all_reduce_scalar(value, op); }

 private:
  // Queues `launch` on `stream` after the compute queued so far; returns the request that joins it back.
  std::unique_ptr<Request> enqueue(cudaStream_t stream, const std::vector<Tensor>& keep_alive,
                                   const std::function<void()>& launch);

  std::unique_ptr<Communicator> mpi_;
  device::CudaDevice& device_;
  ncclComm_t comm_ = nullptr;
  ncclComm_t channel_comm_[2] = {nullptr, nullptr};
  cudaStream_t channel_stream_[2] = {nullptr, nullptr};
};

}  // namespace tandem::comm::nccl
