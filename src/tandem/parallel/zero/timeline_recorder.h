// TimelineRecorder: one offloaded step's Timeline (timeline.h), recorded as an observer of the ParameterStore
// (step_observer.h) and of the checkpoints in host memory, both of which the engine points at it. It marks points of
// the device's queues as the store reports its hooks and copies; the marks become seconds only when the timeline is
// taken, so that recording never makes the host wait for the device in the middle of a step. Armed for the next step,
// it records that step's backward, its copies down and up and its host AdamW (phase 1), then the step after's forward
// (phase 2), which is what the update hides behind. Checkpoints in host memory show their copies on the same tracks:
// down in the recorded step's backward, up in the step after's forward.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/core/device_interface.h"
#include "tandem/nn/host_checkpoints.h"
#include "tandem/parallel/zero/step_observer.h"
#include "tandem/parallel/zero/timeline.h"

namespace tandem::parallel {

class TimelineRecorder final : public StepObserver, public nn::HostCheckpoints::CopyTimeline {
 public:
  explicit TimelineRecorder(Device& device) : device_(device) {}

  // Records the next step (from its begin_step on).
  void arm() { armed_ = true; }

  // The store's step (StepObserver). At each step's begin the phase moves on, and an armed recorder starts. The
  // recorded step's backward, copies and updates are recorded (phase 1), then the step after's forward (phase 2),
  // each hook as one "device" span on the compute queue.
  void step_began(size_t layers) override;
  void layer_began(size_t layer, Pass pass) override {
    if (records(pass)) layer_marks_[layer] = device_.mark();
  }
  void layer_ended(size_t layer, Pass pass, const std::string& name) override {
    if (records(pass))
      span("device", (pass == Pass::Forward ? "forward " : "backward ") + name, layer_marks_[layer], device_.mark());
  }
  uint64_t gradient_down(const std::string& unit, uint64_t after, const std::function<uint64_t()>& copy) override {
    return in_recorded_step() ? marked("to host", unit, DeviceQueue::ToHost, after, copy) : copy();
  }
  // An update queued now belongs to the recorded step: its spans go in the timeline.
  bool watches_update() const override { return phase_ == 1 && timeline_ != nullptr; }
  void host_updated(const std::string& unit, double start, double end) override {
    host_span("host AdamW", unit, start, end);
  }
  uint64_t values_up(const std::string& unit, uint64_t after, const std::function<uint64_t()>& copy) override {
    return marked("to device", unit, DeviceQueue::FromHost, after, copy);
  }
  // Checkpointed layer inputs (nn/host_checkpoints.h): down in the recorded step, up in the step after's forward.
  bool records_copy(bool up) const override { return up ? in_step_after() : in_recorded_step(); }
  void copied(bool up, std::string name, uint64_t start, uint64_t end) override {
    span(up ? "to host" : "to device", std::move(name), start, end);
  }

  // Whether take() has something to give: the step after ran, or with `at_end` the recorded step did.
  bool ready(bool at_end) const { return timeline_ && phase_ >= (at_end ? 1 : 2); }
  // The timeline, its marks turned into seconds (waits for the device to reach them). Only once ready(), and once
  // every update that records into it has finished.
  std::unique_ptr<Timeline> take();

 private:
  // A span whose ends are device marks, until take() turns them into seconds.
  struct MarkedSpan {
    std::string track, name;
    uint64_t start = 0, end = 0;
  };

  // The recorded step's backward (phase 1), the step after's forward (phase 2).
  bool in_recorded_step() const { return phase_ == 1; }
  bool in_step_after() const { return phase_ == 2; }
  bool records(Pass pass) const { return pass == Pass::Forward ? in_step_after() : in_recorded_step(); }
  // `copy` (returning its ticket) issued on `queue` after `after`, that queue marked around it: one span on `track`.
  uint64_t marked(std::string track, const std::string& name, DeviceQueue queue, uint64_t after,
                  const std::function<uint64_t()>& copy);
  // A span between two device marks (Device::mark). Safe from the update's thread.
  void span(std::string track, std::string name, uint64_t start, uint64_t end);
  // A span already in seconds of the host's steady clock (the host AdamW). Safe from the update's thread.
  void host_span(std::string track, std::string name, double start, double end);

  Device& device_;
  bool armed_ = false;
  int phase_ = 0;  // 1: the recorded step; 2: the step after (its forward); 3: a step after that
  std::unique_ptr<Timeline> timeline_;
  std::mutex mu_;  // guards marked_: the update's thread adds the uploads' spans
  std::vector<MarkedSpan> marked_;
  std::vector<uint64_t> layer_marks_;  // by layer: the mark at its hook's start
};

}  // namespace tandem::parallel
