// Timeline: what one offloaded step's parts did when, for people to read: spans on named tracks (the device's
// backward and forward, the copies down and up, the host AdamW), in seconds of the host's steady clock, written as a
// Chrome trace (chrome://tracing, Perfetto) and summed up in one line. It records; it decides nothing.
#pragma once

#include <mutex>
#include <string>
#include <vector>

namespace tandem::parallel {

class Timeline {
 public:
  struct Span {
    std::string track;  // "device", "to host", "host AdamW", "to device"
    std::string name;   // "backward blocks.3"
    double start = 0, end = 0;
  };

  // Safe to call from the host update's thread too.
  void add(std::string track, std::string name, double start, double end);
  std::vector<Span> spans() const;
  // {"traceEvents": [...]}: one complete event a span, microseconds from the first span, `pid` the rank.
  std::string chrome_trace(int pid) const;
  // "backward 812.0 ms; to host 190.3 ms; host AdamW 1.21 s (in 412.0 ms of it the device ran the next forward);
  // to device 188.1 ms; from the backward's end to the last layer's weights back: 1.30 s".
  std::string summary() const;

 private:
  mutable std::mutex mu_;
  std::vector<Span> spans_;
};

}  // namespace tandem::parallel
