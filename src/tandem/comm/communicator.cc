#include "tandem/comm/communicator.h"

namespace tandem::comm {

namespace {
class DoneRequest final : public Request {
 public:
  void wait() override {}
};

// Several started operations waited for as one.
class AllOfRequest final : public Request {
 public:
  explicit AllOfRequest(std::vector<std::unique_ptr<Request>> parts) : parts_(std::move(parts)) {}
  void wait() override {
    for (auto& r : parts_) r->wait();
    parts_.clear();
  }

 private:
  std::vector<std::unique_ptr<Request>> parts_;
};

// The slices of a list of counts back to back: where each starts, and the total.
std::vector<int64_t> starts_of(const std::vector<int64_t>& counts, int64_t& total) {
  std::vector<int64_t> starts(counts.size());
  total = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    TANDEM_CHECK(counts[j] >= 0, "all_to_all_v: a count of ", counts[j]);
    starts[j] = total;
    total += counts[j];
  }
  return starts;
}
}  // namespace

std::unique_ptr<Request> Communicator::all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send,
                                                          const Tensor& out, const std::vector<int64_t>& recv) {
  const auto n = static_cast<size_t>(size());
  TANDEM_CHECK(send.size() == n && recv.size() == n && in.dtype() == out.dtype(), "all_to_all_v over ", n,
               " ranks with ", send.size(), " send and ", recv.size(), " receive counts");
  int64_t sent = 0, received = 0;
  const std::vector<int64_t> from = starts_of(send, sent), to = starts_of(recv, received);
  TANDEM_CHECK(sent <= in.numel() && received <= out.numel(), "all_to_all_v of ", sent, " elements from ", in.numel(),
               " into ", received, " of ", out.numel(), " in '", name(), "'");
  const auto me = static_cast<size_t>(rank());
  TANDEM_CHECK(send[me] == recv[me], "all_to_all_v: ", send[me], " elements to this rank itself, ", recv[me],
               " expected from it");
  std::vector<std::unique_ptr<Request>> parts;
  // Receives first, so that every send finds its receive posted.
  for (size_t j = 0; j < n; ++j)
    if (j != me && recv[j] > 0)
      parts.push_back(recv_async(out.flat_slice(to[j], recv[j], {recv[j]}), static_cast<int>(j), 0));
  for (size_t j = 0; j < n; ++j)
    if (j != me && send[j] > 0)
      parts.push_back(send_async(in.flat_slice(from[j], send[j], {send[j]}), static_cast<int>(j), 0));
  if (send[me] > 0)
    out.flat_slice(to[me], recv[me], {recv[me]}).copy_from(in.flat_slice(from[me], send[me], {send[me]}));
  return std::make_unique<AllOfRequest>(std::move(parts));
}

SelfCommunicator::SelfCommunicator(std::string name, int world_rank)
    : name_(std::move(name)), world_ranks_{world_rank} {}

std::unique_ptr<Request> SelfCommunicator::all_reduce_async(const Tensor&, ReduceOp) {
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> SelfCommunicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp) {
  TANDEM_CHECK(in.numel() == out.numel(), "reduce_scatter over one rank needs equal sizes");
  if (in.raw() != out.raw()) out.copy_from(in);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> SelfCommunicator::all_gather_async(const Tensor& in, const Tensor& out) {
  TANDEM_CHECK(in.numel() == out.numel(), "all_gather over one rank needs equal sizes");
  if (in.raw() != out.raw()) out.copy_from(in);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> SelfCommunicator::broadcast_async(const Tensor&, int) {
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> SelfCommunicator::all_to_all_async(const Tensor& in, const Tensor& out) {
  TANDEM_CHECK(in.numel() == out.numel(), "all_to_all over one rank needs equal sizes");
  out.copy_from(in);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> SelfCommunicator::send_async(const Tensor&, int peer, int) {
  TANDEM_FAIL("send to rank ", peer, " in the one-rank group '", name_, "'");
}

std::unique_ptr<Request> SelfCommunicator::recv_async(const Tensor&, int peer, int) {
  TANDEM_FAIL("recv from rank ", peer, " in the one-rank group '", name_, "'");
}

}  // namespace tandem::comm
