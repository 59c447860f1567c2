#include "tandem/comm/mpi/mpi_communicator.h"

#include <chrono>
#include <climits>
#include <sstream>
#include <thread>

#include "tandem/comm/mpi/mpi_world.h"
#include "tandem/core/error.h"
#include "tandem/core/philox.h"

namespace tandem::comm::mpi {

void check_mpi(int code, const char* call, const std::string& group) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  TANDEM_FAIL(call, " failed on group '", group, "': ", std::string(text, static_cast<size_t>(len)));
}

namespace {

// Elements are moved as their storage: reductions only on f32 (gradients are reduced in fp32).
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::I32:
      return MPI_INT32_T;
    case DType::BF16:
    case DType::F16:
      return MPI_UINT16_T;
    case DType::E4M3:
    case DType::E5M2:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX; }

int count_of(const Tensor& t, const std::string& group) {
  if (t.numel() > INT_MAX)
    TANDEM_FAIL("a single message of ", t.numel(), " elements on group '", group, "' exceeds MPI's int count");
  return static_cast<int>(t.numel());
}

bool is_16bit(DType t) { return t == DType::BF16 || t == DType::F16; }

// 16-bit tensors are reduced in fp32 (MPI has no bf16 sum): widened on the host, reduced, rounded back.
std::vector<float> widen(const Tensor& t) { return t.to_host_floats(); }
void narrow(const std::vector<float>& v, const Tensor& t) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = t.dtype() == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  t.copy_from_host(h.data());
}

class MpiRequest final : public Request {
 public:
  MpiRequest(MpiCommunicator& comm, MPI_Request req, int32_t op, int64_t seq, int peer)
      : comm_(comm), req_(req), op_(op), seq_(seq), peer_(peer) {}
  ~MpiRequest() override {
    if (req_ != MPI_REQUEST_NULL) wait();  // never leave an operation in flight on a freed buffer
  }
  void wait() override {
    if (req_ != MPI_REQUEST_NULL) comm_.wait(req_, op_, seq_, peer_);
  }

 private:
  MpiCommunicator& comm_;
  MPI_Request req_;
  int32_t op_;
  int64_t seq_;
  int peer_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MpiWorld& world, MPI_Comm comm, std::string name)
    : world_(world), comm_(comm), name_(std::move(name)), id_(hash_name(name_)) {
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", name_);
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", name_);
  world_ranks_.resize(static_cast<size_t>(size_));
  const int me = world.rank();
  check_mpi(MPI_Allgather(&me, 1, MPI_INT, world_ranks_.data(), 1, MPI_INT, comm_), "MPI_Allgather", name_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

int64_t MpiCommunicator::begin(int32_t op) {
  const int64_t seq = seq_++;
  world_.progress().started(id_, seq);
  (void)op;
  return seq;
}

std::unique_ptr<Request> MpiCommunicator::started(MPI_Request req, int32_t op, int64_t seq, int peer) {
  return std::make_unique<MpiRequest>(*this, req, op, seq, peer);
}

std::unique_ptr<Request> MpiCommunicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  if (is_16bit(t.dtype())) {
    std::vector<float> v = widen(t);
    const int64_t seq = begin(kAllReduce);
    MPI_Request req;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, v.data(), count_of(t, name_), MPI_FLOAT, mpi_op(op), comm_, &req),
              "MPI_Iallreduce", name_);
    wait(req, kAllReduce, seq);
    narrow(v, t);
    return started(MPI_REQUEST_NULL, kAllReduce, seq);
  }
  const int64_t seq = begin(kAllReduce);
  MPI_Request req;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, t.raw(), count_of(t, name_), mpi_type(t.dtype()), mpi_op(op), comm_, &req),
            "MPI_Iallreduce", name_);
  return started(req, kAllReduce, seq);
}

std::unique_ptr<Request> MpiCommunicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) {
  if (is_16bit(in.dtype()))
    TANDEM_FAIL("reduce_scatter on group '", name_, "' of a ", dtype_name(in.dtype()),
                " tensor: gradients are reduced in fp32");
  TANDEM_CHECK(in.numel() == out.numel() * size_ && in.dtype() == out.dtype(), "reduce_scatter of ", in.numel(),
               " into ", out.numel(), " x ", size_);
  const int64_t seq = begin(kReduceScatter);
  MPI_Request req;
  check_mpi(MPI_Ireduce_scatter_block(in.raw(), out.raw(), count_of(out, name_), mpi_type(in.dtype()), mpi_op(op),
                                      comm_, &req),
            "MPI_Ireduce_scatter_block", name_);
  return started(req, kReduceScatter, seq);
}

std::unique_ptr<Request> MpiCommunicator::all_gather_async(const Tensor& in, const Tensor& out) {
  TANDEM_CHECK(out.numel() == in.numel() * size_ && in.dtype() == out.dtype(), "all_gather of ", in.numel(), " into ",
               out.numel(), " x ", size_);
  const int64_t seq = begin(kAllGather);
  MPI_Request req;
  const int n = count_of(in, name_);
  // The owned shard may already sit in its place inside the output (ZeRO's values): gather in place.
  const bool in_place = in.raw() == static_cast<char*>(out.raw()) + static_cast<size_t>(rank_) * in.nbytes();
  check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.raw(), n, mpi_type(in.dtype()), out.raw(), n,
                           mpi_type(in.dtype()), comm_, &req),
            "MPI_Iallgather", name_);
  return started(req, kAllGather, seq);
}

std::unique_ptr<Request> MpiCommunicator::broadcast_async(const Tensor& t, int root) {
  const int64_t seq = begin(kBroadcast);
  MPI_Request req;
  check_mpi(MPI_Ibcast(t.raw(), count_of(t, name_), mpi_type(t.dtype()), root, comm_, &req), "MPI_Ibcast", name_);
  return started(req, kBroadcast, seq);
}

std::unique_ptr<Request> MpiCommunicator::all_to_all_async(const Tensor& in, const Tensor& out) {
  TANDEM_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0 && in.dtype() == out.dtype(), "all_to_all of ",
               in.numel(), " into ", out.numel(), " over ", size_);
  const int64_t seq = begin(kAllToAll);
  MPI_Request req;
  const Tensor slice = in.flat_slice(0, in.numel() / size_, {in.numel() / size_});
  const int n = count_of(slice, name_);
  check_mpi(MPI_Ialltoall(in.raw(), n, mpi_type(in.dtype()), out.raw(), n, mpi_type(in.dtype()), comm_, &req),
            "MPI_Ialltoall", name_);
  return started(req, kAllToAll, seq);
}

// Point-to-point operations do not take a group sequence number (they pair two ranks, not the group); the
// watchdog still names them by the tag.
std::unique_ptr<Request> MpiCommunicator::send_async(const Tensor& t, int peer, int tag) {
  MPI_Request req;
  check_mpi(MPI_Isend(t.raw(), count_of(t, name_), mpi_type(t.dtype()), peer, tag, comm_, &req), "MPI_Isend", name_);
  return started(req, kSend, tag, peer);
}

std::unique_ptr<Request> MpiCommunicator::recv_async(const Tensor& t, int peer, int tag) {
  MPI_Request req;
  check_mpi(MPI_Irecv(t.raw(), count_of(t, name_), mpi_type(t.dtype()), peer, tag, comm_, &req), "MPI_Irecv", name_);
  return started(req, kRecv, tag, peer);
}

void MpiCommunicator::barrier() {
  const int64_t seq = begin(kBarrier);
  MPI_Request req;
  check_mpi(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier", name_);
  wait(req, kBarrier, seq);
}

double MpiCommunicator::all_reduce_scalar(double value, ReduceOp op) {
  const int64_t seq = begin(kScalar);
  MPI_Request req;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, mpi_op(op), comm_, &req), "MPI_Iallreduce", name_);
  wait(req, kScalar, seq);
  return value;
}

void MpiCommunicator::wait(MPI_Request& req, int32_t op, int64_t seq, int peer) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto next_liveness_check = start + std::chrono::seconds(1);
  world_.progress().waiting(id_, name_, seq, op);
  // Poll rather than block in MPI_Wait so a hang becomes a message. Spin briefly, then sleep a little:
  // tests run more ranks than cores, and a spinning rank would starve the one it waits for.
  int spins = 0;
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test", name_);
    if (done) break;
    if (++spins < 200) continue;
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 2000 ? 20 : 200));
    const auto now = clock::now();
    const double waited = std::chrono::duration<double>(now - start).count();
    if (waited > world_.timeout_s()) fire(op, seq, peer, waited);
    // A peer whose process has exited never arrives: say so now rather than at the timeout.
    if (now >= next_liveness_check) {
      next_liveness_check = now + std::chrono::seconds(1);
      if (!dead_members(op, peer).empty()) fire(op, seq, peer, waited);
    }
  }
  world_.progress().finished_waiting();
}

std::vector<int> MpiCommunicator::dead_members(int32_t op, int peer) const {
  std::vector<int> dead;
  const bool p2p = op == kSend || op == kRecv;
  for (size_t i = 0; i < world_ranks_.size(); ++i) {
    const int w = world_ranks_[i];
    if (w == world_.rank() || (p2p && static_cast<int>(i) != peer)) continue;
    PeerProgress p;
    if (world_.progress().read(w, id_, p) && !p.alive) dead.push_back(w);
  }
  return dead;
}

void MpiCommunicator::fire(int32_t op, int64_t seq, int peer, double waited_s) {
  const std::vector<int> dead = dead_members(op, peer);
  std::ostringstream os;
  os << "[tandem watchdog] rank " << world_.rank() << ": " << op_name(op);
  if (op == kSend || op == kRecv) {
    const int w = world_ranks_[static_cast<size_t>(peer)];
    os << (op == kSend ? " to" : " from") << " rank " << w << " (tag " << seq << ")";
  } else {
    os << " #" << seq;
  }
  os << " on group '" << name_ << "' (world ranks";
  for (int r : world_ranks_) os << " " << r;
  os << ")";
  if (!dead.empty()) {
    // Whether or not a dead rank had started this operation, it will never finish its part.
    os << " cannot complete after " << static_cast<int>(waited_s) << " s: rank" << (dead.size() > 1 ? "s" : "");
    for (size_t i = 0; i < dead.size(); ++i) os << (i ? ", " : " ") << dead[i];
    os << (dead.size() > 1 ? " are" : " is")
       << " dead: " << (dead.size() > 1 ? "their processes have" : "its process has") << " exited.";
  } else {
    os << " has waited " << static_cast<int>(waited_s) << " s, over the " << world_.timeout_s() << " s timeout.";
  }
  if (op != kSend && op != kRecv) {
    std::ostringstream missing, unknown;
    int n_missing = 0;
    for (int r : world_ranks_) {
      if (r == world_.rank()) continue;
      PeerProgress p;
      if (!world_.progress().read(r, id_, p)) {
        unknown << " " << r;
        continue;
      }
      if (p.started >= seq || !p.alive) continue;
      ++n_missing;
      missing << " " << r << " (";
      if (p.waiting)
        missing << "waiting in " << op_name(p.wait_op) << (p.wait_op == kSend || p.wait_op == kRecv ? " tag " : " #")
                << p.wait_seq << " on '" << p.wait_group_name << "'";
      else
        missing << "busy outside communication, or hung";
      missing << ")";
    }
    if (n_missing) os << " Ranks that have not arrived:" << missing.str() << ".";
    if (!unknown.str().empty()) os << " On other hosts (not visible from here):" << unknown.str() << ".";
  }
  if (dead.empty())
    os << " A rank is hung or has died; the job is aborted. Raise parallel.timeout_s if steps are just slow.";
  else
    os << " The job is aborted; resume it from its last checkpoint with --resume.";
  world_.abort(os.str());
}

}  // namespace tandem::comm::mpi
