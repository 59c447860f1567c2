#include "tandem/comm/communicator.h"

namespace tandem::comm {

namespace {
class DoneRequest final : public Request {
 public:
  void wait() override {}
};
}  // namespace

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
