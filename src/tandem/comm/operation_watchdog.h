// OperationWatchdog: watches operations that the host does not wait on itself (NCCL's, queued on a GPU stream)
// and names the one that hangs. Each pending operation brings a probe that says whether it has completed; a
// background thread polls them every `poll` (sleeping in between, and not at all while none is pending) and drops
// the completed ones. When one has been pending longer than the timeout, or the asynchronous-error probe returns
// a text (the communicator has failed), it calls the timeout action once, with a message in the MPI watchdog's
// words, and polls no more. The action is injected: NCCL aborts its communicators and the job; a test records it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem::comm {

class OperationWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // What the message says about one operation, and how to tell that it is done.
  struct Operation {
    std::string name;    // e.g. "all_reduce"
    int64_t seq = 0;     // the group's sequence number of this operation
    std::string detail;  // more about it, e.g. "to rank 5, tag 2" for a send (may be empty)
    std::string group;
    std::vector<int> world_ranks;  // the group's members
    // True once the operation has completed. Called on the watchdog's thread; it must not block. If it throws,
    // the operation cannot be watched and the watchdog fires at once with the exception's text.
    std::function<bool()> completed;
  };

  // `rank`: this process's world rank, for the message. `timeout_s`: how long an operation may stay pending
  // (infinity: never times out). `on_timeout` is called at most once, on the watchdog's thread, without any lock
  // held; it must not throw, and it may not return (NCCL's ends the process). `async_error` (optional) returns a
  // non-empty text when the operations can no longer complete; it is polled while something is pending. `thread_setup`
  // (optional) runs once on the watchdog's thread before it polls (the NCCL path makes the rank's GPU current there, so
  // the probes do not touch another device).
  OperationWatchdog(int rank, double timeout_s, std::function<void(std::string)> on_timeout,
                    std::function<std::string()> async_error = {}, std::function<void()> thread_setup = {},
                    std::chrono::milliseconds poll = std::chrono::milliseconds(50));
  // Stops and joins the thread (after the action, if it is running); pending operations are dropped unfired.
  ~OperationWatchdog();
  OperationWatchdog(const OperationWatchdog&) = delete;
  OperationWatchdog& operator=(const OperationWatchdog&) = delete;

  // Starts watching `op` from now. Any thread may call it.
  void add(Operation op);
  // The operations added and not yet seen completed.
  size_t pending() const;
  // The timeout action has been called (or is being called).
  bool fired() const;

 private:
  struct Pending {
    Operation op;
    Clock::time_point start;
  };

  void run();
  // Drops the completed operations of `ops`; returns the message to fire with, or empty.
  std::string poll(std::vector<Pending>& ops);
  std::string describe(const Pending& p, Clock::time_point now) const;

  const int rank_;
  const double timeout_s_;
  const std::function<void(std::string)> on_timeout_;
  const std::function<std::string()> async_error_;
  const std::function<void()> thread_setup_;
  const std::chrono::milliseconds poll_;
  std::string setup_error_;  // what thread_setup threw, if it did; read only by the watchdog's thread

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Pending> added_;  // added since the thread last took them, oldest first
  size_t pending_ = 0;          // added and not yet seen completed (including those being polled)
  bool idle_ = false;           // the thread sleeps until something is added (else it wakes every `poll` by itself)
  bool stop_ = false;
  bool fired_ = false;
  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace tandem::comm
