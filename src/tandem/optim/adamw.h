// AdamW over segments of flat fp32 buffers: fp32 moments, weight decay (decoupled, or as L2 regularisation
// for DeepSpeed's Adam with adam_w_mode false) applied only to the parameters marked `decay`. A segment is the
// unit a ZeRO shard later owns; here it is one parameter. Its settings are the config's optimizer struct
// (config/train_config.h), read in float as the op takes them.
#pragma once

#include <string>
#include <vector>

#include "tandem/config/train_config.h"
#include "tandem/core/tensor.h"

namespace tandem::optim {

// One contiguous run of parameters the optimizer updates, with its moments.
struct Segment {
  std::string name;  // parameter name, for checkpoints
  Tensor value;      // (n) fp32
  Tensor grad;       // (n) fp32
  bool decay = true;
  int64_t offset = 0;  // where the segment starts in the parameter (its flattened tensor-parallel slot)
};

class AdamW {
 public:
  // Allocates the moments (zeros) for every segment on the segments' device.
  AdamW(std::vector<Segment> segments, const config::OptimizerConfig& cfg);

  // One update with learning rate `lr`; gradients are read multiplied by `grad_scale` (clipping, loss
  // scaling). Counts the step.
  void step(float lr, float grad_scale = 1.0f);

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<Tensor>& exp_avg() const { return m_; }     // one per segment, (n)
  const std::vector<Tensor>& exp_avg_sq() const { return v_; }  // one per segment, (n)
  const config::OptimizerConfig& config() const { return cfg_; }

 private:
  std::vector<Segment> segments_;
  config::OptimizerConfig cfg_;
  std::vector<Tensor> m_, v_;
  int64_t step_ = 0;
};

}  // namespace tandem::optim
