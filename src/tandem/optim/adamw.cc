// One AdamW step over every segment: the op per segment, with decay only where the segment allows it.
#include "tandem/optim/adamw.h"

#include "tandem/ops/ops.h"

namespace tandem::optim {

AdamW::AdamW(std::vector<Segment> segments, const config::OptimizerConfig& cfg)
    : segments_(std::move(segments)), cfg_(cfg) {
  for (const Segment& s : segments_) {
    m_.push_back(Tensor::zeros(s.value.shape(), DType::F32, s.value.device(), s.name + " exp_avg"));
    v_.push_back(Tensor::zeros(s.value.shape(), DType::F32, s.value.device(), s.name + " exp_avg_sq"));
  }
}

void AdamW::step(float lr, float grad_scale) {
  ++step_;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    ops::AdamWParams p;
    p.lr = lr;
    p.beta1 = static_cast<float>(cfg_.beta1);
    p.beta2 = static_cast<float>(cfg_.beta2);
    p.eps = static_cast<float>(cfg_.eps);
    p.weight_decay = s.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    p.decoupled = cfg_.adam_w_mode;
    p.step = step_;
    p.grad_scale = grad_scale;
    ops::adamw_step(s.value, s.grad, m_[i], v_[i], p);
  }
}

}  // namespace tandem::optim
