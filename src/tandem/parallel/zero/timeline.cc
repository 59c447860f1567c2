#include "tandem/parallel/zero/timeline.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace tandem::parallel {

namespace {

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s >= 1 ? "%.2f s" : "%.1f ms", s >= 1 ? s : s * 1e3);
  return buf;
}

// The length of the union of `spans` that lies inside [from, to).
double covered(std::vector<std::pair<double, double>> spans, double from, double to) {
  std::sort(spans.begin(), spans.end());
  double total = 0, reach = from;
  for (const auto& [a, b] : spans) {
    const double lo = std::max(a, reach), hi = std::min(b, to);
    if (hi > lo) total += hi - lo;
    reach = std::max(reach, std::min(b, to));
  }
  return total;
}

}  // namespace

void Timeline::add(std::string track, std::string name, double start, double end) {
  std::lock_guard<std::mutex> lock(mu_);
  spans_.push_back({std::move(track), std::move(name), start, std::max(start, end)});
}

std::vector<Timeline::Span> Timeline::spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_;
}

std::string Timeline::chrome_trace(int pid) const {
  const std::vector<Span> all = spans();
  double origin = 1e300;
  for (const Span& s : all) origin = std::min(origin, s.start);
  nlohmann::json events = nlohmann::json::array();
  for (const Span& s : all)
    events.push_back({{"name", s.name},
                      {"cat", s.track},
                      {"ph", "X"},
                      {"pid", pid},
                      {"tid", s.track},
                      {"ts", (s.start - origin) * 1e6},
                      {"dur", (s.end - s.start) * 1e6}});
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

std::string Timeline::summary() const {
  const std::vector<Span> all = spans();
  std::map<std::string, std::vector<std::pair<double, double>>> by_track;
  for (const Span& s : all) by_track[s.track].emplace_back(s.start, s.end);
  auto busy = [&](const std::string& track) {
    const auto it = by_track.find(track);
    return it == by_track.end() ? 0.0 : covered(it->second, -1e300, 1e300);
  };
  double backward_end = -1e300, last_up = -1e300, update_start = 1e300, update_end = -1e300;
  std::vector<std::pair<double, double>> forward;
  for (const Span& s : all) {
    if (s.track == "device" && s.name.rfind("backward", 0) == 0) backward_end = std::max(backward_end, s.end);
    if (s.track == "device" && s.name.rfind("forward", 0) == 0) forward.emplace_back(s.start, s.end);
    if (s.track == "to device") last_up = std::max(last_up, s.end);
    if (s.track == "host AdamW") {
      update_start = std::min(update_start, s.start);
      update_end = std::max(update_end, s.end);
    }
  }
  std::string out = "device " + seconds_str(busy("device")) + "; to host " + seconds_str(busy("to host")) +
                    "; host AdamW " + seconds_str(busy("host AdamW"));
  if (update_end > update_start)
    out += " (the device ran the next step's forward during " +
           seconds_str(covered(forward, update_start, update_end)) + " of it)";
  out += "; to device " + seconds_str(busy("to device"));
  if (last_up > backward_end && backward_end > -1e300)
    out += "; from the backward's end to the last weights back: " + seconds_str(last_up - backward_end);
  return out;
}

}  // namespace tandem::parallel
