#include "tandem/parallel/zero/timeline_recorder.h"

#include <utility>

namespace tandem::parallel {

void TimelineRecorder::begin_step(size_t layers) {
  if (phase_ == 1 || phase_ == 2) ++phase_;  // recorded marks stop at phase 3
  if (armed_ && phase_ == 0) {
    armed_ = false;
    phase_ = 1;
    timeline_ = std::make_unique<Timeline>();
    layer_marks_.assign(layers, 0);
  }
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
