// optim::AdamW over segments: the decay applies only to segments marked `decay`, decoupled (AdamW) or as L2
// regularisation (Adam with adam_w_mode false), against a float64 reference of three steps.
#include <gtest/gtest.h>

#include <cmath>

#include "tandem/device/cpu_device.h"
#include "tandem/optim/adamw.h"
#include "test_util.h"

namespace tandem::optim {
namespace {

using testing::fill_normal;
using testing::rel_error;
using testing::to_double;

// The float64 step of one element, for a weight `p` with moments `m`, `v` at step `t`.
void reference_step(double& p, double g, double& m, double& v, int t, const spec::OptimizerConfig& c, double wd,
                    double lr) {
  const double gi = g + (c.adam_w_mode ? 0.0 : wd * p);
  m = c.beta1 * m + (1 - c.beta1) * gi;
  v = c.beta2 * v + (1 - c.beta2) * gi * gi;
  const double m_hat = m / (1 - std::pow(double(c.beta1), t)), v_hat = v / (1 - std::pow(double(c.beta2), t));
  p -= lr * (m_hat / (std::sqrt(v_hat) + c.eps) + (c.adam_w_mode ? wd * p : 0.0));
}

void check_decay_only_where_marked(bool decoupled) {
  device::CpuDevice dev;
  const int64_t n = 37;
  spec::OptimizerConfig cfg;
  cfg.weight_decay = 0.2;
  cfg.adam_w_mode = decoupled;
  std::vector<Segment> segments;
  for (const bool decay : {true, false}) {
    Segment s;
    s.name = decay ? "w" : "bias";
    s.value = Tensor::empty({n}, DType::F32, dev, s.name);  // (n)
    s.grad = Tensor::empty({n}, DType::F32, dev, s.name + " grad");
    s.decay = decay;
    fill_normal(s.value, decay ? 1 : 2);
    segments.push_back(s);
  }
  std::vector<std::vector<double>> p, m(2, std::vector<double>(n, 0.0)), v = m;
  for (const Segment& s : segments) p.push_back(to_double(s.value));
  AdamW opt(segments, cfg);
  const float lr = 0.05f;
  for (int t = 1; t <= 3; ++t) {
    for (size_t k = 0; k < 2; ++k) {
      fill_normal(segments[k].grad, 100 + 10 * t + k);
      const std::vector<double> g = to_double(segments[k].grad);
      const double wd = segments[k].decay ? cfg.weight_decay : 0.0;
      for (int64_t i = 0; i < n; ++i) reference_step(p[k][i], g[i], m[k][i], v[k][i], t, cfg, wd, lr);
    }
    opt.step(lr);
    for (size_t k = 0; k < 2; ++k)
      EXPECT_LT(rel_error(to_double(segments[k].value), p[k]), 1e-6)
          << segments[k].name << " at step " << t << (decoupled ? " (AdamW)" : " (L2)");
  }
}

TEST(AdamW, DecoupledDecayOnlyOnMarkedSegments) { check_decay_only_where_marked(true); }

TEST(AdamW, L2DecayOnlyOnMarkedSegments) { check_decay_only_where_marked(false); }

}  // namespace
}  // namespace tandem::optim
