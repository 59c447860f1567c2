#include "tandem/comm/nccl/nccl_communicator.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "tandem/comm/mpi/mpi_world.h"
#include "tandem/comm/mpi/progress_table.h"
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
// not handed to anything that could run before NCCL is done with it. The event is shared with the watchdog,
// which polls it until it completes, however early the request is waited on or destroyed.
class NcclRequest final : public Request {
 public:
  NcclRequest(device::CudaDevice& device, std::shared_ptr<device::CudaEvent> done, std::vector<Tensor> keep_alive)
      : device_(device), done_(std::move(done)), keep_alive_(std::move(keep_alive)) {}
  ~NcclRequest() override { wait(); }
  void wait() override {
    if (waited_) return;
    device_.compute_wait(*done_);
    waited_ = true;
    keep_alive_.clear();
  }

 private:
  device::CudaDevice& device_;
  std::shared_ptr<device::CudaEvent> done_;
  std::vector<Tensor> keep_alive_;
  bool waited_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> mpi, device::CudaDevice& device, mpi::MpiWorld& world)
    : mpi_(std::move(mpi)), device_(device), world_(world) {
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
  // The probes run on the watchdog's thread: it makes this rank's GPU current first, so that querying (and
  // destroying) the events does not open a context on another device.
  watchdog_ = std::make_unique<OperationWatchdog>(
      world_.rank(), world_.timeout_s(), [this](std::string message) { abort_job(message); },
      [this] { return async_error(); }, [&device = device_] { device.make_current(); });
}

NcclCommunicator::~NcclCommunicator() {
  // First: its probes and its action use the communicators destroyed below.
  watchdog_.reset();
  for (int c = 0; c < 2; ++c) {
    if (channel_comm_[c]) ncclCommDestroy(channel_comm_[c]);
    if (channel_stream_[c]) cudaStreamDestroy(channel_stream_[c]);
  }
  if (comm_) ncclCommDestroy(comm_);
}

std::string NcclCommunicator::async_error() const {
  const ncclComm_t comms[3] = {comm_, channel_comm_[0], channel_comm_[1]};
  const char* what[3] = {"collectives'", "channel 0's", "channel 1's"};
  for (int i = 0; i < 3; ++i) {
    ncclResult_t state = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comms[i], &state), "ncclCommGetAsyncError", name());
    if (state == ncclSuccess || state == ncclInProgress) continue;
    std::string text = std::string("NCCL reports an asynchronous error on the ") + what[i] +
                       " communicator: " + ncclGetErrorString(state);
    const char* last = ncclGetLastError(comms[i]);
    if (last && *last) text += std::string(" (") + last + ")";
    return text;
  }
  return {};
}

void NcclCommunicator::abort_job(const std::string& message) {
  // The message first, as the MPI path prints it: aborting the communicators may take a while.
  std::fprintf(stderr, "%s The job is aborted.\n", message.c_str());
  std::fflush(stderr);
  // Should ncclCommAbort itself never return, the job still ends.
  std::thread([&world = world_] {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    world.abort("[tandem watchdog] aborting the NCCL communicators took over 60 s; the job is aborted.");
  }).detach();
  // The stuck kernels end and the host thread blocked behind them is released. Only logged: the job ends anyway.
  for (ncclComm_t comm : {comm_, channel_comm_[0], channel_comm_[1]}) {
    if (!comm) continue;
    const ncclResult_t code = ncclCommAbort(comm);
    if (code != ncclSuccess)
      std::fprintf(stderr, "[tandem watchdog] ncclCommAbort failed on group '%s': %s\n", name().c_str(),
                   ncclGetErrorString(code));
  }
  // From this thread, though MPI was initialised for the main thread's calls only: MPI_Abort is the last call
  // this process makes, and it ends every rank of the job as the MPI watchdog's does.
  world_.abort("");
}

std::string NcclCommunicator::p2p_detail(const char* direction, int peer, int tag) const {
  return std::string(direction) + " rank " + std::to_string(world_ranks()[static_cast<size_t>(peer)]) + ", tag " +
         std::to_string(tag);
}

std::unique_ptr<Request> NcclCommunicator::enqueue(int32_t op, int which, std::string detail, cudaStream_t stream,
                                                   const std::vector<Tensor>& keep_alive,
                                                   const std::function<void()>& launch) {
  device::CudaEvent ready = device_.record_compute();
  ready.wait_in(stream);
  launch();
  auto done = std::make_shared<device::CudaEvent>();
  done->record(stream);
  // Any answer but "not ready" ends the watch: an error is the device's failure, which this rank's own thread
  // reports at its next CUDA call.
  watchdog_->add({mpi::op_name(op), seq_[which]++, std::move(detail), name(), world_ranks(),
                  [done] { return cudaEventQuery(done->get()) != cudaErrorNotReady; }});
  return std::make_unique<NcclRequest>(device_, std::move(done), keep_alive);
}

std::unique_ptr<Request> NcclCommunicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  return enqueue(mpi::kAllReduce, 0, {}, device_.comm_stream(), {t}, [&] {
    check_nccl(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), nccl_op(op), comm_,
                             device_.comm_stream()),
               "ncclAllReduce", name());
  });
}

std::unique_ptr<Request> NcclCommunicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) {
  TANDEM_CHECK(in.numel() == out.numel() * size() && in.dtype() == out.dtype(), "reduce_scatter shapes");
  return enqueue(mpi::kReduceScatter, 0, {}, device_.comm_stream(), {in, out}, [&] {
    check_nccl(ncclReduceScatter(in.raw(), out.raw(), static_cast<size_t>(out.numel()), nccl_type(in.dtype()),
                                 nccl_op(op), comm_, device_.comm_stream()),
               "ncclReduceScatter", name());
  });
}

std::unique_ptr<Request> NcclCommunicator::all_gather_async(const Tensor& in, const Tensor& out) {
  TANDEM_CHECK(out.numel() == in.numel() * size() && in.dtype() == out.dtype(), "all_gather shapes");
  // In place when `in` is out's own slice: NCCL allows sendbuff == recvbuff + rank * count.
  return enqueue(mpi::kAllGather, 0, {}, device_.comm_stream(), {in, out}, [&] {
    check_nccl(ncclAllGather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()), comm_,
                             device_.comm_stream()),
               "ncclAllGather", name());
  });
}

std::unique_ptr<Request> NcclCommunicator::broadcast_async(const Tensor& t, int root) {
  return enqueue(mpi::kBroadcast, 0, {}, device_.comm_stream(), {t}, [&] {
    check_nccl(ncclBroadcast(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root, comm_,
                             device_.comm_stream()),
               "ncclBroadcast", name());
  });
}

// NCCL has no all-to-all collective: a group of one send and one receive per peer, the rank's own slice copied in the
// group like any other (ncclSend / ncclRecv to itself pair inside one group call).
std::unique_ptr<Request> NcclCommunicator::all_to_all_async(const Tensor& in, const Tensor& out) {
  TANDEM_CHECK(in.numel() == out.numel() && in.numel() % size() == 0 && in.dtype() == out.dtype(), "all_to_all shapes");
  return enqueue(mpi::kAllToAll, 0, {}, device_.comm_stream(), {in, out}, [&] {
    const auto n = static_cast<size_t>(in.numel() / size());
    const size_t bytes = n * dtype_size(in.dtype());
    check_nccl(ncclGroupStart(), "ncclGroupStart", name());
    for (int peer = 0; peer < size(); ++peer) {
      check_nccl(ncclSend(static_cast<const char*>(in.raw()) + peer * bytes, n, nccl_type(in.dtype()), peer, comm_,
                          device_.comm_stream()),
                 "ncclSend", name());
      check_nccl(ncclRecv(static_cast<char*>(out.raw()) + peer * bytes, n, nccl_type(in.dtype()), peer, comm_,
                          device_.comm_stream()),
                 "ncclRecv", name());
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd", name());
  });
}

// The uneven form: the same group of sends and receives, each peer's slice of its own size (empty ones left out).
std::unique_ptr<Request> NcclCommunicator::all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send,
                                                              const Tensor& out, const std::vector<int64_t>& recv) {
  const auto n = static_cast<size_t>(size());
  TANDEM_CHECK(send.size() == n && recv.size() == n && in.dtype() == out.dtype(), "all_to_all_v over ", n, " ranks");
  int64_t sent = 0, received = 0;
  for (size_t j = 0; j < n; ++j) {
    sent += send[j];
    received += recv[j];
  }
  TANDEM_CHECK(sent <= in.numel() && received <= out.numel(), "all_to_all_v of ", sent, " elements from ", in.numel(),
               " into ", received, " of ", out.numel());
  return enqueue(mpi::kAllToAll, 0, {}, device_.comm_stream(), {in, out}, [&] {
    const size_t width = dtype_size(in.dtype());
    size_t from = 0, to = 0;
    check_nccl(ncclGroupStart(), "ncclGroupStart", name());
    for (size_t peer = 0; peer < n; ++peer) {
      const auto s = static_cast<size_t>(send[peer]), r = static_cast<size_t>(recv[peer]);
      if (s > 0)
        check_nccl(ncclSend(static_cast<const char*>(in.raw()) + from * width, s, nccl_type(in.dtype()),
                            static_cast<int>(peer), comm_, device_.comm_stream()),
                   "ncclSend", name());
      if (r > 0)
        check_nccl(ncclRecv(static_cast<char*>(out.raw()) + to * width, r, nccl_type(in.dtype()),
                            static_cast<int>(peer), comm_, device_.comm_stream()),
                   "ncclRecv", name());
      from += s;
      to += r;
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd", name());
  });
}

// Point-to-point: NCCL pairs a rank's sends to a peer with that peer's receives in posting order per
// communicator; the pipeline schedules post both sides of each channel in the same order.
std::unique_ptr<Request> NcclCommunicator::send_async(const Tensor& t, int peer, int tag) {
  const int c = tag & 1;
  return enqueue(mpi::kSend, 1 + c, p2p_detail("to", peer, tag), channel_stream_[c], {t}, [&] {
    check_nccl(ncclSend(t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), peer, channel_comm_[c],
                        channel_stream_[c]),
               "ncclSend", name());
  });
}

std::unique_ptr<Request> NcclCommunicator::recv_async(const Tensor& t, int peer, int tag) {
  const int c = tag & 1;
  return enqueue(mpi::kRecv, 1 + c, p2p_detail("from", peer, tag), channel_stream_[c], {t}, [&] {
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
