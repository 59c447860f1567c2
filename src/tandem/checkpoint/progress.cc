// Progress lines (progress.h).
#include "tandem/checkpoint/progress.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "tandem/core/units.h"

namespace tandem::checkpoint {

ProgressOptions ProgressOptions::from(const Diagnostics& diagnostics) {
  ProgressOptions o;
  if (diagnostics.progress_s) o.first_after_s = o.every_s = *diagnostics.progress_s;
  return o;
}

Progress::Progress(std::string what, uint64_t total_bytes, bool enabled, ProgressOptions options)
    : what_(std::move(what)),
      total_(total_bytes),
      enabled_(enabled),
      options_(std::move(options)),
      start_s_(now_s()),
      next_s_(options_.first_after_s) {}

double Progress::now_s() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Progress::say(const std::string& line) const {
  if (options_.sink) {
    options_.sink(line);
    return;
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string Progress::rate_text(double seconds) const {
  return format_bytes(static_cast<uint64_t>(static_cast<double>(done_) / std::max(seconds, 1e-9))) + "/s";
}

void Progress::add(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ += bytes;
  if (!enabled_ || finished_) return;
  const double t = now_s() - start_s_;
  if (t < next_s_) return;
  next_s_ = t + options_.every_s;
  std::string line = what_ + ": " + format_bytes(done_);
  if (total_ > 0) {
    const double left = total_ > done_ ? static_cast<double>(total_ - done_) : 0.0;
    const double rate = static_cast<double>(done_) / std::max(t, 1e-9);
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.0f%%", 100.0 * static_cast<double>(done_) / static_cast<double>(total_));
    line += " of " + format_bytes(total_) + " (" + pct + "), " + rate_text(t) + ", ETA " +
            (rate > 0 ? format_duration(left / rate) : std::string("unknown"));
  } else {
    line += ", " + rate_text(t);
  }
  say(line);
  printed_ = true;
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (!enabled_ || !printed_) return;
  const double t = now_s() - start_s_;
  say(what_ + ": " + format_bytes(done_) + " in " + format_duration(t) + ", " + rate_text(t));
}

uint64_t Progress::done_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool Progress::printed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return printed_;
}

}  // namespace tandem::checkpoint
