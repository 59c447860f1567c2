// AdamW over segments of flat fp32 buffers: fp32 moments, weight decay (decoupled, or as L2 regularisation
// for DeepSpeed's Adam with adam_w_mode false) applied only to the parameters marked `decay`. A segment is the
// unit a ZeRO shard later owns; here it is one parameter. Its settings are the config's optimizer struct
// (spec/train.h), read in float as the op takes them.
#pragma once

#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/spec/train.h"

namespace tandem::optim {

// One contiguous run of parameters the optimizer updates, with its moments.
struct Segment {
  std::string name;  // parameter name, for checkpoints
  Tensor value;      // (n) fp32; undefined when the segment's value and moments live elsewhere (a swap file)
  Tensor grad;       // (n) fp32
  bool decay = true;
  int64_t offset = 0;  // where the segment starts in the parameter (its flattened tensor-parallel slot)
};

class AdamW {
 public:
  // Allocates the moments (zeros) for every segment on the segments' device, but for segments without a value:
  // their state is kept elsewhere and given to update_one.
  AdamW(std::vector<Segment> segments, const spec::OptimizerConfig& cfg);

  // One update with learning rate `lr`; gradients are read multiplied by `grad_scale` (clipping, loss
  // scaling). Counts the step.
  void step(float lr, float grad_scale = 1.0f);
  // The same in parts: count the step, then update segments [first, end) (each segment once per step, in any order
  // and on any thread; a segment's update reads and writes only its own tensors).
  void begin_step() { ++step_; }
  void update(size_t first, size_t end, float lr, float grad_scale) const;
  // Segment i's update on state the caller holds (its value and moments read in from a swap file, or the segment's
  // own), (n) each; `rounded`, when defined, (n) bf16/f16: the updated value rounded to it in the same pass. `step`:
  // the step it belongs to (its bias corrections), when not the one counted last (an update that runs on while the
  // next step has been counted). `at`: where the (n) elements start in the segment (a piece of it; 0: all of it).
  void update_one(size_t i, const Tensor& value, const Tensor& exp_avg, const Tensor& exp_avg_sq, float lr,
                  float grad_scale, const Tensor& rounded = Tensor(), int64_t step = 0, int64_t at = 0) const;

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<Tensor>& exp_avg() const { return m_; }     // one per segment, (n); undefined without a value
  const std::vector<Tensor>& exp_avg_sq() const { return v_; }  // one per segment, (n); likewise
  const spec::OptimizerConfig& config() const { return cfg_; }

 private:
  std::vector<Segment> segments_;
  spec::OptimizerConfig cfg_;
  std::vector<Tensor> m_, v_;
  int64_t step_ = 0;
};

}  // namespace tandem::optim
