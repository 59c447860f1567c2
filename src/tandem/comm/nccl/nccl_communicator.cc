#include "tandem/comm/nccl/nccl_communicator.h"

#include <cstring>
#include <functional>

#include "tandem/device/cuda/cuda_check.h"

namespace tandem::comm::nccl {

void check_nccl(ncclResult_t code, const char* call, const std::string& group) {
  if (code != ncclSuccess) TANDEM_FAIL(call, " failed on group '", group, "': ", ncclGetErrorString(code));
}

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::I32:
      return ncclInt32;
    case DType::E4M3:
    case DType::E5M2:
      return ncclUint8;  // moved as bytes, never reduced
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclMax; }

// The compute stream waits for the operation's event; the tensors stay alive until then, so their memory is
// not handed to anything that could run before NCCL is done with it.
class NcclRequest final : public Request {
 public:
  NcclRequest(device::CudaDevice& device, device::CudaEvent done, std::vector<Tensor> keep_alive)
      : device_(device), done_(std::move(done)), keep_alive_(std::move(keep_alive)) {}
  ~NcclRequest() override { wait(); }
  void wait() override {
    if (waited_) return;
    device_.compute_wait(done_);
    waited_ = true;
    keep_alive_.clear();
  }

 private:
  device::CudaDevice& device_;
  device::CudaEvent done_;
  std::vector<Tensor> keep_alive_;
  bool waited_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> mpi, device::CudaDevice& device)
    : mpi_(std::move(mpi)), device_(device) {
  device_.make_current();
  auto make_comm = [&](ncclComm_t* comm) {
    ncclUniqueId id;
    if (mpi_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", name());
    // The id travels through the MPI group as 16-bit words, each exact in a double.
    static_assert(sizeof(ncclUniqueId) % 2 == 0);
    std::vector<uint16_t> words(sizeof(ncclUniqueId) / 2);
    std::memcpy(words.data(), &id, sizeof id);
    for (auto& w : words) w = static_cast<uint16_t>(mpi_->all_reduce_scalar(mpi_->rank() == 0 ? w : 0.0));
    std::memcpy(&id, words.data(), sizeof id);
    check_nccl(ncclCommInitRank(comm, size(), id, rank()), "ncclCommInitRank", name());
  };
  make_comm(&comm_);
  for (int c = 0; c < 2; ++c) {
    make_comm(&channel_comm_[c]);
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&channel_stream_[c], cudaStreamNonBlocking));
  }
}

NcclCommunicator::~NcclCommunicator() {
  for (int c = 0; c < 2; ++c) {
    if (channel_comm_[c]) ncclCommDestroy(channel_comm_[c]);
    if (channel_stream_[c]) cudaStreamDestroy(channel_stream_[c]);
  }
  if (comm_) ncclCommDestroy(comm_);
}

std::unique_ptr<Request> NcclCommunicator::enqueue(cudaStream_t stream, const std::vector<Tensor>& keep_alive,
                                                   const std::function<void()>& launch) {
  device::CudaEvent ready = device_.record_compute();
  ready.wait_in(stream);
  launch();
  device::CudaEvent done;
  done.record(stream);
  return std::make_unique<NcclRequest>(device_, std::move(done), keep_alive);
}

std::unique_ptr<Request> NcclCommunicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  return enqueue(device_.comm_stream(), {t}, [&] {
    check_nccl(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), nccl_op(op), comm_,
                             device_.comm_stream()),
               "ncclAllReduce", name());
  });
}

std::unique_ptr<Request> NcclCommunicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) {
  TANDEM_CHECK(in.numel() == out.numel() * size() && in.dtype() == out.dtype(), "reduce_scatter shapes");
  return enqueue(device_.comm_stream(), {in, out}, [&] {
    check_nccl(ncclReduceScatter(in.raw(), out.raw(), static_cast<size_t>(out.numel()), nccl_type(in.dtype()),
                                 nccl_op(op), comm_, device_.comm_stream()),
               "ncclReduceScatter", name());
  });
}

std::unique_ptr<Request> NcclCommunicator::all_gather_async(const Tensor& in, const Tensor& out) {
  TANDEM_CHECK(out.numel() == in.numel() * size() && in.dtype() == out.dtype(), "all_gather shapes");
  // In place when `in` is out's own slice: NCCL allows sendbuff == recvbuff + rank * count.
  return enqueue(device_.comm_stream(), {in, out}, [&] {
    check_nccl(ncclAllGather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()), comm_,
                             device_.comm_stream()),
               "ncclAllGather", name());
  });
}

std::unique_ptr<Request> NcclCommunicator::broadcast_async(const Tensor& t, int root) {
  return enqueue(device_.comm_stream(), {t}, [&] {
    check_nccl(ncclBroadcast(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root, comm_,
                             device_.comm_stream()),
               "ncclBroadcast", name());
  });
}

// Point-to-point: NCCL pairs a rank's sends to a peer with that peer's receives in posting order per
// communicator; the pipeline schedules post both sides of each channel in the same order.
std::unique_ptr<Request> NcclCommunicator::send_async(const Tensor& t, int peer, int tag) {
  const int c = tag & 1;
  return enqueue(channel_stream_[c], {t}, [&] {
    check_nccl(ncclSend(t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), peer, channel_comm_[c],
                        channel_stream_[c]),
               "ncclSend", name());
  });
}

std::unique_ptr<Request> NcclCommunicator::recv_async(const Tensor& t, int peer, int tag) {
  const int c = tag & 1;
  return enqueue(channel_stream_[c], {t}, [&] {
    check_nccl(ncclRecv(t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), peer, channel_comm_[c],
                        channel_stream_[c]),
               "ncclRecv", name());
  });
}

void NcclCommunicator::barrier() {
  device_.synchronize();
  mpi_->barrier();
}

}  // namespace tandem::comm::nccl
