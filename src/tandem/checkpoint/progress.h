// Progress of a long read or write, said as it goes, so that minutes of I/O are never silent:
//   writing checkpoint step_00000008: 448.1 MiB of 979.1 MiB (46%), 129.3 MiB/s, ETA 4.1s
// A line every `every_s` seconds once the work has run `first_after_s` (quick work says nothing), and a closing line
// when any was printed. It only reports: the caller does the I/O and says how many bytes are done.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "tandem/core/diagnostics.h"

namespace tandem::checkpoint {

struct ProgressOptions {
  double first_after_s = 3;                      // quiet before this
  double every_s = 5;                            // then a line at most this often
  std::function<void(const std::string&)> sink;  // where lines go (without newline); null: stdout
  std::function<double()> clock;  // seconds on a steady clock; null: std::chrono::steady_clock (tests drive their own)
  // The defaults, with first_after_s = every_s = S when the diagnostics say TANDEM_PROGRESS_S=S (S = 0: a line at every
  // add(), for the tests that check the lines of work too short to wait for).
  static ProgressOptions from(const Diagnostics& diagnostics);
};

class Progress {
 public:
  // `what` names the work ("writing checkpoint step_00000010"); `total_bytes` 0 when unknown (no percentage, no
  // ETA). Nothing is printed when `enabled` is false (ranks other than 0).
  Progress(std::string what, uint64_t total_bytes, bool enabled, ProgressOptions options = ProgressOptions());
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `bytes` more are done. Thread-safe: a background writer reports through it.
  void add(uint64_t bytes);
  // The closing line ("<what>: 3.4 GiB in 8.2s, 415.0 MiB/s"), when any line was printed.
  void finish();
  uint64_t done_bytes() const;
  bool printed() const;

 private:
  void say(const std::string& line) const;
  std::string rate_text(double seconds) const;

  double now_s() const;  // options_.clock's reading

  std::string what_;
  uint64_t total_;
  bool enabled_;
  ProgressOptions options_;
  double start_s_;
  mutable std::mutex mu_;
  uint64_t done_ = 0;
  double next_s_;  // seconds since start_ when the next line is due
  bool printed_ = false;
  bool finished_ = false;
};

}  // namespace tandem::checkpoint
