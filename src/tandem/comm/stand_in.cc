#include "tandem/comm/stand_in.h"

namespace tandem::comm {
namespace {

struct Done final : Request {
  void wait() override {}
};
std::unique_ptr<Request> done() { return std::make_unique<Done>(); }

}  // namespace

StandInCommunicator::StandInCommunicator(std::string name, device::CommAxis axis, int rank, int size)
    : name_(std::move(name)), axis_(axis), rank_(rank), size_(size) {
  for (int i = 0; i < size; ++i) ranks_.push_back(i);
}

void StandInCommunicator::record(const Tensor& t, double bus_bytes) const {
  device::CountingDevice* d = device::as_counting(t.device());
  if (!d || size_ <= 1) return;
  const auto a = static_cast<size_t>(axis_);
  d->work().comm_calls[a] += 1;
  d->work().comm_bus_bytes[a] += bus_bytes;
}

// Bus bytes as NCCL counts them: an all-reduce of S bytes over n ranks moves 2 (n-1)/n S, a reduce-scatter or an
// all-gather of S bytes in all (n-1)/n S.
std::unique_ptr<Request> StandInCommunicator::all_reduce_async(const Tensor& t, ReduceOp) {
  record(t, 2.0 * (size_ - 1) / size_ * static_cast<double>(t.nbytes()));
  return done();
}

std::unique_ptr<Request> StandInCommunicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp) {
  out.copy_from(in.flat_slice(rank_ * out.numel(), out.numel(), out.shape()));
  record(in, static_cast<double>(size_ - 1) / size_ * static_cast<double>(in.nbytes()));
  return done();
}

std::unique_ptr<Request> StandInCommunicator::all_gather_async(const Tensor& in, const Tensor& out) {
  for (int i = 0; i < size_; ++i) {
    const Tensor slot = out.flat_slice(i * in.numel(), in.numel(), in.shape());
    if (slot.raw() != in.raw()) slot.copy_from(in);
  }
  record(out, static_cast<double>(size_ - 1) / size_ * static_cast<double>(out.nbytes()));
  return done();
}

std::unique_ptr<Request> StandInCommunicator::broadcast_async(const Tensor& t, int) {
  record(t, static_cast<double>(t.nbytes()));
  return done();
}

// Each rank keeps its own slice and sends the other (n-1)/n of its bytes.
std::unique_ptr<Request> StandInCommunicator::all_to_all_async(const Tensor& in, const Tensor& out) {
  TANDEM_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0, "all_to_all of ", in.numel(), " into ",
               out.numel(), " over ", size_);
  out.copy_from(in);
  record(in, static_cast<double>(size_ - 1) / size_ * static_cast<double>(in.nbytes()));
  return done();
}

// A send does not wait for its receiver; the receiver waits for the message, so receives carry its cost.
std::unique_ptr<Request> StandInCommunicator::send_async(const Tensor&, int, int) { return done(); }

std::unique_ptr<Request> StandInCommunicator::recv_async(const Tensor& t, int, int) {
  t.fill_zero();
  record(t, static_cast<double>(t.nbytes()));
  return done();
}

}  // namespace tandem::comm
