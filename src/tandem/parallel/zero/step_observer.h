// StepObserver: what the ParameterStore tells whoever watches its steps (the offload timeline's TimelineRecorder,
// timeline_recorder.h, which the engine installs): a step's start, each layer hook's start and end, its gradients'
// copies down to host memory, and the offloaded updates it queues. The store's hooks make one call each and record
// nothing themselves; without an observer they make none.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace tandem::parallel {

class StepObserver {
 public:
  enum class Pass { Forward, Backward };
  virtual ~StepObserver() = default;

  // A step begins (the store's begin_step), on a model of `layers` layers.
  virtual void step_began(size_t layers) = 0;
  // A layer's hook starts (before_forward, before_backward) and ends (after_forward, after_backward); `name` is the
  // layer's.
  virtual void layer_began(size_t layer, Pass pass) = 0;
  virtual void layer_ended(size_t layer, Pass pass, const std::string& name) = 0;
  // A unit's gradient going down to host memory: `copy` issues it after the device work of `after` and returns its
  // ticket, which this returns.
  virtual uint64_t gradient_down(const std::string& unit, uint64_t after, const std::function<uint64_t()>& copy) = 0;
  // Whether the update of a unit queued now is watched: its host AdamW and its uploads are then reported below, from
  // the update's thread.
  virtual bool watches_update() const = 0;
  // A watched update's AdamW on the host, in seconds of the host's steady clock.
  virtual void host_updated(const std::string& unit, double start, double end) = 0;
  // A watched update's new values going up to the device: as gradient_down.
  virtual uint64_t values_up(const std::string& unit, uint64_t after, const std::function<uint64_t()>& copy) = 0;
};

}  // namespace tandem::parallel
