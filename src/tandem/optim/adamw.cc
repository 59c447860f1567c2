// One AdamW step over every segment: the op per segment, with decay only where the segment allows it.
#include "tandem/optim/adamw.h"

#include "tandem/ops/ops.h"

namespace tandem::optim {

AdamW::AdamW(std::vector<Segment> segments, const spec::OptimizerConfig& cfg)
    : segments_(std::move(segments)), cfg_(cfg) {
  for (const Segment& s : segments_) {
    if (!s.value.defined()) {
      m_.emplace_back();
      v_.emplace_back();
      continue;
    }
    m_.push_back(Tensor::zeros(s.value.shape(), DType::F32, s.value.device(), s.name + " exp_avg"));
    v_.push_back(Tensor::zeros(s.value.shape(), DType::F32, s.value.device(), s.name + " exp_avg_sq"));
  }
}

void AdamW::step(float lr, float grad_scale) {
  begin_step();
  update(0, segments_.size(), lr, grad_scale);
}

void AdamW::update(size_t first, size_t end, float lr, float grad_scale) const {
  TANDEM_CHECK(first <= end && end <= segments_.size(), "AdamW::update of segments [", first, ", ", end, ") of ",
               segments_.size());
  for (size_t i = first; i < end; ++i) update_one(i, segments_[i].value, m_[i], v_[i], lr, grad_scale);
}

void AdamW::update_one(size_t i, const Tensor& value, const Tensor& exp_avg, const Tensor& exp_avg_sq, float lr,
                       float grad_scale, const Tensor& rounded, int64_t step, int64_t at) const {
  const Segment& s = segments_.at(i);
  ops::AdamWParams p;
  p.lr = lr;
  p.beta1 = static_cast<float>(cfg_.beta1);
  p.beta2 = static_cast<float>(cfg_.beta2);
  p.eps = static_cast<float>(cfg_.eps);
  p.weight_decay = s.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
  p.decoupled = cfg_.adam_w_mode;
  p.step = step > 0 ? step : step_;
  p.grad_scale = grad_scale;
  const int64_t n = value.numel();
  const Tensor grad = at == 0 && n == s.grad.numel() ? s.grad : s.grad.flat_slice(at, n, {n});
  ops::adamw_step(value, grad, exp_avg, exp_avg_sq, p, rounded);
}

}  // namespace tandem::optim
