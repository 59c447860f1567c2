#include "tandem/parallel/zero/timeline_recorder.h"

#include <utility>

namespace tandem::parallel {

void TimelineRecorder::step_began(size_t layers) {
  if (phase_ == 1 || phase_ == 2) ++phase_;  // recorded marks stop at phase 3
  if (armed_ && phase_ == 0) {
    armed_ = false;
    phase_ = 1;
    timeline_ = std::make_unique<Timeline>();
    layer_marks_.assign(layers, 0);
  }
}

uint64_t TimelineRecorder::marked(std::string track, const std::string& name, DeviceQueue queue, uint64_t after,
                                  const std::function<uint64_t()>& copy) {
  const uint64_t start = device_.mark(queue, after);
  const uint64_t ticket = copy();
  span(std::move(track), name, start, device_.mark(queue));
  return ticket;
}

void TimelineRecorder::span(std::string track, std::string name, uint64_t start, uint64_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  marked_.push_back({std::move(track), std::move(name), start, end});
}

void TimelineRecorder::host_span(std::string track, std::string name, double start, double end) {
  timeline_->add(std::move(track), std::move(name), start, end);
}

std::unique_ptr<Timeline> TimelineRecorder::take() {
  for (const MarkedSpan& m : marked_)
    timeline_->add(m.track, m.name, device_.mark_seconds(m.start), device_.mark_seconds(m.end));
  marked_.clear();
  phase_ = 0;
  return std::move(timeline_);
}

}  // namespace tandem::parallel
