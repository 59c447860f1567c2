#include "tandem/comm/operation_watchdog.h"

#include <exception>
#include <iomanip>
#include <optional>
#include <sstream>

namespace tandem::comm {

namespace {

// Runs a probe; an exception becomes its text in `failure`.
template <class F>
auto guarded(F&& probe, std::string& failure) -> decltype(probe()) {
  try {
    return probe();
  } catch (const std::exception& e) {
    failure = *e.what() ? e.what() : "an exception without a message";
  } catch (...) {
    failure = "an unknown exception";
  }
  return {};
}

}  // namespace

OperationWatchdog::OperationWatchdog(int rank, double timeout_s, std::function<void(std::string)> on_timeout,
                                     std::function<std::string()> async_error, std::function<void()> thread_setup,
                                     std::chrono::milliseconds poll)
    : rank_(rank),
      timeout_s_(timeout_s),
      on_timeout_(std::move(on_timeout)),
      async_error_(std::move(async_error)),
      thread_setup_(std::move(thread_setup)),
      poll_(poll),
      thread_([this] { run(); }) {}

OperationWatchdog::~OperationWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void OperationWatchdog::add(Operation op) {
  Pending p{std::move(op), Clock::now()};
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Once fired (the job is ending) or stopping, nothing more is watched; `p` is dropped outside the lock.
    if (fired_ || stop_) return;
    added_.push_back(std::move(p));
    ++pending_;
    wake = idle_;
  }
  // Only a sleeping thread is woken: a polling one takes the operation at its next poll.
  if (wake) wake_.notify_one();
}

size_t OperationWatchdog::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

bool OperationWatchdog::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

void OperationWatchdog::run() {
  if (thread_setup_) {
    try {
      thread_setup_();
    } catch (const std::exception& e) {
      setup_error_ = std::string("its thread could not be set up: ") + e.what();
    }
  }
  // The operations this thread polls, oldest first. Declared before the lock, so they are dropped (on this
  // thread, their probes with them) after it is released.
  std::vector<Pending> watched;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    idle_ = watched.empty() && added_.empty();
    wake_.wait(lock, [&] { return stop_ || !added_.empty() || !watched.empty(); });
    idle_ = false;
    if (stop_) return;
    for (Pending& p : added_) watched.push_back(std::move(p));
    added_.clear();
    // The probes run without the lock: registering never waits for them.
    lock.unlock();
    const size_t before = watched.size();
    std::string message = poll(watched);
    lock.lock();
    pending_ -= before - watched.size();
    if (!message.empty() && !stop_) {
      fired_ = true;
      lock.unlock();
      on_timeout_(std::move(message));
      return;
    }
    if (wake_.wait_for(lock, poll_, [&] { return stop_; })) return;
  }
}

std::string OperationWatchdog::poll(std::vector<Pending>& ops) {
  const Clock::time_point now = Clock::now();
  std::vector<Pending> still;
  still.reserve(ops.size());
  std::string failed;          // the first probe that threw: its operation and text
  std::optional<size_t> late;  // the oldest operation past the timeout (its index in `still`)
  for (Pending& p : ops) {
    std::string failure;
    const bool done = guarded(p.op.completed, failure);
    if (done) continue;
    still.push_back(std::move(p));
    const Pending& kept = still.back();
    if (!failure.empty() && failed.empty()) failed = describe(kept, now) + " and cannot be watched: " + failure + ".";
    if (!late && std::chrono::duration<double>(now - kept.start).count() > timeout_s_) late = still.size() - 1;
  }
  ops.swap(still);  // `still` now holds the completed operations and the moved-from ones, dropped on return
  if (ops.empty()) return {};
  if (!failed.empty()) return failed;
  if (!setup_error_.empty()) return describe(ops.front(), now) + " and cannot be watched: " + setup_error_ + ".";
  if (async_error_) {
    std::string failure;
    std::string text = guarded(async_error_, failure);
    if (!failure.empty()) return describe(ops.front(), now) + " and cannot be watched: " + failure + ".";
    // The communicator has failed: every pending operation is lost, the oldest is named.
    if (!text.empty()) return describe(ops.front(), now) + " and cannot complete: " + text + ".";
  }
  if (late) {
    std::ostringstream os;
    os << describe(ops[*late], now) << ", over the " << timeout_s_
       << " s timeout. A rank is hung or has died (raise parallel.timeout_s if steps are just slow).";
    return os.str();
  }
  return {};
}

std::string OperationWatchdog::describe(const Pending& p, Clock::time_point now) const {
  const double waited = std::chrono::duration<double>(now - p.start).count();
  std::ostringstream os;
  os << "[tandem watchdog] rank " << rank_ << ": " << p.op.name << " #" << p.op.seq;
  if (!p.op.detail.empty()) os << " (" << p.op.detail << ")";
  os << " on group '" << p.op.group << "' (world ranks";
  for (int r : p.op.world_ranks) os << " " << r;
  os << ") has waited ";
  // Whole seconds as the MPI watchdog says them; a tenth where that would read "0 s".
  if (waited >= 10)
    os << static_cast<int64_t>(waited);
  else
    os << std::fixed << std::setprecision(1) << waited;
  os << " s";
  return os.str();
}

}  // namespace tandem::comm
