#include "job.h"

#include <cstdio>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/tensor.h"
#include "tandem/device/cpu_device.h"

namespace tandem::app {

Job::Job(int* argc, char*** argv) {
  if (!comm::mpi::launched_by_mpi()) return;
  world_ = std::make_unique<comm::mpi::MpiWorld>(argc, argv);
  setup_ = world_->world();
}

Job::~Job() { setup_.reset(); }

void Job::agreed(const std::function<void()>& fn) {
  if (!world_) {
    fn();
    return;
  }
  std::string error;
  try {
    fn();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  const int failing = static_cast<int>(setup_->all_reduce_scalar(error.empty() ? 0.0 : 1.0));
  if (failing == 0) return;
  const int first = static_cast<int>(-setup_->all_reduce_scalar(
      error.empty() ? -static_cast<double>(size()) : -static_cast<double>(rank()), comm::ReduceOp::Max));
  if (rank() == first) {
    if (failing == size())
      std::fprintf(stderr, "error: %s\n", error.c_str());
    else
      std::fprintf(stderr, "error on rank %d%s: %s\n", rank(),
                   failing > 1 ? (" (and " + std::to_string(failing - 1) + " other ranks)").c_str() : "",
                   error.c_str());
    std::fflush(stderr);
  }
  end_setup_failed();
}

void Job::end_setup_failed() {
  // Every rank is here, outside any collective: the abort only makes the launcher's exit code 1.
  setup_->barrier();
  world_->abort("", 1);
}

double Job::min(double value) { return world_ ? -setup_->all_reduce_scalar(-value, comm::ReduceOp::Max) : value; }

std::string Job::from_rank0(const std::function<std::string()>& fn) {
  if (!world_) return fn();
  std::string text, error;
  if (rank() == 0) {
    try {
      text = fn();
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "unknown error";
    }
  }
  if (setup_->all_reduce_scalar(error.empty() ? 0.0 : 1.0, comm::ReduceOp::Max) > 0) {
    if (rank() == 0) {
      std::fprintf(stderr, "error: %s\n", error.c_str());
      std::fflush(stderr);
    }
    end_setup_failed();
  }
  device::CpuDevice host(0, rank());
  const auto length = static_cast<int64_t>(setup_->all_reduce_scalar(rank() == 0 ? text.size() : 0.0));
  Tensor bytes = Tensor::zeros({std::max<int64_t>(length, 1)}, DType::I32, host, "broadcast text");  // (length)
  if (rank() == 0)
    for (int64_t i = 0; i < length; ++i) bytes.i32()[i] = static_cast<unsigned char>(text[static_cast<size_t>(i)]);
  setup_->broadcast(bytes, 0);
  std::string out(static_cast<size_t>(length), '\0');
  for (int64_t i = 0; i < length; ++i) out[static_cast<size_t>(i)] = static_cast<char>(bytes.i32()[i]);
  return out;
}

void Job::fail_agreed(const std::string& message) {
  if (!world_) TANDEM_FAIL(message);
  if (rank() == 0) {
    std::fprintf(stderr, "error: %s\n", message.c_str());
    std::fflush(stderr);
  }
  end_setup_failed();
}

void Job::fail(const std::string& message) {
  if (!world_) TANDEM_FAIL(message);
  // The other ranks may be waiting in a collective: end the whole job now rather than at the watchdog.
  world_->abort("error on rank " + std::to_string(rank()) + ": " + message, 1);
}

}  // namespace tandem::app
