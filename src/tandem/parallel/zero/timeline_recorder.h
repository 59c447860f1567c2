// TimelineRecorder: the ParameterStore's part in recording one offloaded step's Timeline (timeline.h). The store marks
// points of the device's queues as its hooks run; the marks become seconds only when the timeline is taken, so that
// recording never makes the host wait for the device in the middle of a step. Armed for the next step, it records
// that step's backward, its copies down and up and its host AdamW (phase 1), then the step after's forward (phase 2),
// which is what the update hides behind. Checkpoints in host memory show their copies on the same tracks: down in the
// recorded step's backward, up in the step after's forward.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/core/device_interface.h"
#include "tandem/nn/host_checkpoints.h"
#include "tandem/parallel/zero/timeline.h"

namespace tandem::parallel {

class TimelineRecorder final : public nn::HostCheckpoints::CopyTimeline {
 public:
  explicit TimelineRecorder(Device& device) : device_(device) {}

  // Records the next step (from its begin_step on).
  void arm() { armed_ = true; }
  // At each step's begin: the phase moves on, and an armed recorder starts (`layers`: the model's layer count).
  void begin_step(size_t layers);
  // The recorded step's backward, its copies and its updates (phase 1).
  bool in_recorded_step() const { return phase_ == 1; }
  // Whether an update queued now belongs to the recorded step (its spans go in the timeline).
  bool records_update() const { return phase_ == 1 && timeline_ != nullptr; }
  // The step after the recorded one, whose forward runs beside the recorded step's host update (phase 2).
  bool in_step_after() const { return phase_ == 2; }

  // A layer's hook starts and ends (on the compute queue): one "device" span from the start to now.
  void layer_started(size_t layer) { layer_marks_[layer] = device_.mark(); }
  void layer_ended(size_t layer, std::string name) {
    span("device", std::move(name), layer_marks_[layer], device_.mark());
  }
  // A span between two device marks (Device::mark). Safe from the update's thread.
  void span(std::string track, std::string name, uint64_t start, uint64_t end);
  // A span already in seconds of the host's steady clock (the host AdamW). Safe from the update's thread.
  void host_span(std::string track, std::string name, double start, double end);
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

  Device& device_;
  bool armed_ = false;
  int phase_ = 0;  // 1: the recorded step; 2: the step after (its forward); 3: a step after that
  std::unique_ptr<Timeline> timeline_;
  std::mutex mu_;  // guards marked_: the update's thread adds the uploads' spans
  std::vector<MarkedSpan> marked_;
  std::vector<uint64_t> layer_marks_;  // by layer: the mark at its hook's start
};

}  // namespace tandem::parallel
