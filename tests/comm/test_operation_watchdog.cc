// OperationWatchdog with test doubles for the operations and the timeout action. The timing assertions are
// only the ones that hold by construction (the action never comes before the timeout); every wait for the
// watchdog is bounded but generous, so a loaded machine makes these tests slower, never failing.
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tandem/comm/operation_watchdog.h"

namespace tandem::comm {
namespace {

using Clock = OperationWatchdog::Clock;
using namespace std::chrono_literals;

constexpr auto kPoll = 10ms;
constexpr double kNever = std::numeric_limits<double>::infinity();

// Polls `done` every few milliseconds for up to 20 s; true once it holds.
template <class F>
bool eventually(F&& done) {
  const auto until = Clock::now() + 20s;
  while (Clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return done();
}

// Stands in for the job's abort: records each call.
struct Action {
  std::mutex mu;
  std::vector<std::string> messages;
  std::vector<Clock::time_point> times;

  std::function<void(std::string)> record() {
    return [this](std::string message) {
      const auto now = Clock::now();
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(std::move(message));
      times.push_back(now);
    };
  }
  size_t calls() {
    std::lock_guard<std::mutex> lock(mu);
    return messages.size();
  }
  std::string message(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    return messages.at(i);
  }
  Clock::time_point time(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    return times.at(i);
  }
};

OperationWatchdog::Operation op(std::string name, int64_t seq, std::function<bool()> completed,
                                std::string detail = {}) {
  return {std::move(name), seq, std::move(detail), "dp(pp=0,tp=1)", {1, 3, 5}, std::move(completed)};
}

bool never() { return false; }

TEST(OperationWatchdog, OperationThatNeverCompletesFiresOnceAfterTheTimeout) {
  Action action;
  const double timeout_s = 0.2;
  OperationWatchdog dog(3, timeout_s, action.record(), {}, {}, kPoll);
  const auto start = Clock::now();  // before registering: the action cannot come earlier than start + timeout
  dog.add(op("all_reduce", 7, never));
  dog.add(op("all_gather", 8, never));
  ASSERT_TRUE(eventually([&] { return action.calls() > 0; }));
  EXPECT_TRUE(dog.fired());
  std::this_thread::sleep_for(20 * kPoll);
  ASSERT_EQ(action.calls(), 1u);  // once, though both operations are late
  EXPECT_GE(std::chrono::duration<double>(action.time(0) - start).count(), timeout_s);
  const std::string m = action.message(0);
  // The oldest operation is the one named.
  EXPECT_NE(m.find("[tandem watchdog] rank 3: all_reduce #7 on group 'dp(pp=0,tp=1)' (world ranks 1 3 5) has waited"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("over the 0.2 s timeout."), std::string::npos) << m;
  EXPECT_EQ(m.find("all_gather"), std::string::npos) << m;
  EXPECT_EQ(dog.pending(), 2u);
}

TEST(OperationWatchdog, OperationThatCompletesBeforeTheTimeoutNeverFires) {
  Action action;
  // Long enough that no scheduling delay lets it pass before the third poll.
  OperationWatchdog dog(0, 5.0, action.record(), {}, {}, kPoll);
  auto probes = std::make_shared<std::atomic<int>>(0);
  dog.add(op("reduce_scatter", 0, [probes] { return ++*probes >= 3; }));  // done at its third probe
  dog.add(op("broadcast", 1, [] { return true; }));
  ASSERT_TRUE(eventually([&] { return dog.pending() == 0; }));
  EXPECT_GE(probes->load(), 3);
  std::this_thread::sleep_for(20 * kPoll);
  EXPECT_EQ(action.calls(), 0u);
  EXPECT_FALSE(dog.fired());
  EXPECT_EQ(probes.use_count(), 1);  // the completed operation's probe was dropped
}

TEST(OperationWatchdog, AsynchronousErrorFiresAtOnceWithItsText) {
  Action action;
  std::atomic<bool> failed{false};
  auto async_error = [&]() -> std::string {
    return failed ? "remote process exited or there was a network error" : "";
  };
  OperationWatchdog dog(2, kNever, action.record(), async_error, {}, kPoll);  // only the error can fire it
  dog.add(op("recv", 4, never, "from rank 5, tag 1"));
  std::this_thread::sleep_for(5 * kPoll);
  EXPECT_EQ(action.calls(), 0u);
  failed = true;
  ASSERT_TRUE(eventually([&] { return action.calls() > 0; }));
  ASSERT_EQ(action.calls(), 1u);
  const std::string m = action.message(0);
  EXPECT_NE(m.find("rank 2: recv #4 (from rank 5, tag 1) on group 'dp(pp=0,tp=1)' (world ranks 1 3 5)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("cannot complete: remote process exited or there was a network error."), std::string::npos) << m;
  EXPECT_EQ(m.find("timeout"), std::string::npos) << m;
}

TEST(OperationWatchdog, AsynchronousErrorIsAskedOnlyWhileSomethingIsPending) {
  Action action;
  std::atomic<int> asked{0};
  auto async_error = [&]() -> std::string {
    ++asked;
    return "unhandled system error";
  };
  OperationWatchdog dog(0, kNever, action.record(), async_error, {}, kPoll);
  std::this_thread::sleep_for(10 * kPoll);
  EXPECT_EQ(asked.load(), 0);
  EXPECT_EQ(action.calls(), 0u);
  dog.add(op("all_reduce", 0, never));
  ASSERT_TRUE(eventually([&] { return action.calls() > 0; }));
  EXPECT_NE(action.message(0).find("all_reduce #0"), std::string::npos) << action.message(0);
}

TEST(OperationWatchdog, DestroyingWithAPendingOperationNeitherFiresNorHangs) {
  Action action;
  auto probes = std::make_shared<std::atomic<int>>(0);
  {
    OperationWatchdog dog(
        0, 60.0, action.record(), [] { return std::string(); }, {}, kPoll);
    dog.add(op(
        "send", 0, [probes] { return ++*probes < 0; }, "to rank 1, tag 0"));
    ASSERT_TRUE(eventually([&] { return probes->load() > 0; }));  // the thread is polling it
  }
  EXPECT_EQ(action.calls(), 0u);
  EXPECT_EQ(probes.use_count(), 1);  // the pending operation was dropped with the watchdog
  {
    // Idle (the thread asleep until something is added), and destroyed at once.
    OperationWatchdog idle(0, 0.2, action.record(), {}, {}, kPoll);
    std::this_thread::sleep_for(5 * kPoll);
  }
  { OperationWatchdog at_once(0, 0.2, action.record(), {}, {}, kPoll); }
  EXPECT_EQ(action.calls(), 0u);
}

TEST(OperationWatchdog, ProbeThatThrowsFiresWithItsText) {
  Action action;
  OperationWatchdog dog(1, kNever, action.record(), {}, {}, kPoll);
  dog.add(op("all_gather", 9, []() -> bool { throw std::runtime_error("the event cannot be queried"); }));
  ASSERT_TRUE(eventually([&] { return action.calls() > 0; }));
  const std::string m = action.message(0);
  EXPECT_NE(m.find("all_gather #9"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot be watched: the event cannot be queried."), std::string::npos) << m;
}

TEST(OperationWatchdog, ThreadSetupRunsOnTheWatchdogsThreadBeforeAnyProbe) {
  Action action;
  std::atomic<bool> set_up{false}, probed_before_setup{false};
  std::thread::id setup_thread, probe_thread;
  std::mutex mu;
  OperationWatchdog dog(
      0, kNever, action.record(), {},
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        setup_thread = std::this_thread::get_id();
        set_up = true;
      },
      kPoll);
  dog.add(op("broadcast", 0, [&] {
    if (!set_up) probed_before_setup = true;
    std::lock_guard<std::mutex> lock(mu);
    probe_thread = std::this_thread::get_id();
    return true;
  }));
  ASSERT_TRUE(eventually([&] { return dog.pending() == 0; }));
  EXPECT_FALSE(probed_before_setup.load());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(setup_thread, probe_thread);
  EXPECT_NE(setup_thread, std::this_thread::get_id());
}

TEST(OperationWatchdog, ThreadSetupThatThrowsFiresOnceSomethingIsPending) {
  Action action;
  OperationWatchdog dog(
      0, kNever, action.record(), {}, [] { throw std::runtime_error("no such device"); }, kPoll);
  std::this_thread::sleep_for(5 * kPoll);
  EXPECT_EQ(action.calls(), 0u);
  dog.add(op("all_reduce", 3, never));
  ASSERT_TRUE(eventually([&] { return action.calls() > 0; }));
  EXPECT_NE(action.message(0).find("all_reduce #3"), std::string::npos) << action.message(0);
  EXPECT_NE(action.message(0).find("no such device"), std::string::npos) << action.message(0);
}

TEST(OperationWatchdog, RegistersFromManyThreads) {
  Action action;
  OperationWatchdog dog(0, 60.0, action.record(), {}, {}, kPoll);
  std::atomic<bool> done{false};
  constexpr int kThreads = 4, kEach = 250;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) dog.add(op("send", t * kEach + i, [&] { return done.load(); }));
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(dog.pending(), static_cast<size_t>(kThreads * kEach));
  done = true;
  ASSERT_TRUE(eventually([&] { return dog.pending() == 0; }));
  EXPECT_EQ(action.calls(), 0u);
}

}  // namespace
}  // namespace tandem::comm
