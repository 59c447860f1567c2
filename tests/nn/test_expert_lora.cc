// LoRA adapters on a mixture of experts' stacked experts (expert_lora.h, PEFT's target_parameters): a layer with
// adapters on gate_up and down against the same layer without adapters whose experts' weights are merged in the test,
// W_e + s B_e A_e for each expert e, written out in double: the output and the input gradient equal, and each
// expert's dA_e = s B_e^T dW_e and dB_e = s dW_e A_e^T from the merged layer's weight gradient dW_e; the frozen base
// takes no gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../ops/ops_test_util.h"
#include "tandem/nn/lora.h"
#include "tandem/nn/moe.h"

namespace tandem::nn {
namespace {

using device::CpuDevice;
using testing::from_double;
using testing::randn;
using testing::rel_error;
using testing::to_double;

constexpr int64_t kN = 10, kC = 6, kF = 5, kR = 2;
constexpr int kE = 4, kK = 2;
constexpr float kScaling = 1.5f;

std::map<std::string, Parameter*> by_name(MoeMlp& layer) {
  std::map<std::string, Parameter*> out;
  for (Parameter* p : layer.parameters()) out[p->name] = p;
  return out;
}

// W_e + s B_e A_e for each expert: w (E, out, in), a (E, r, in), b (E, out, r).
std::vector<double> merged(std::vector<double> w, const std::vector<double>& a, const std::vector<double>& b,
                           int64_t out, int64_t in) {
  for (int e = 0; e < kE; ++e)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t k = 0; k < kR; ++k)
          w[(e * out + o) * in + i] += kScaling * b[(e * out + o) * kR + k] * a[(e * kR + k) * in + i];
  return w;
}

// dA_e = s B_e^T dW_e (r, in) and dB_e = s dW_e A_e^T (out, r), from dW (E, out, in).
std::vector<double> grad_a(const std::vector<double>& dw, const std::vector<double>& b, int64_t out, int64_t in) {
  std::vector<double> g(static_cast<size_t>(kE * kR * in), 0.0);
  for (int e = 0; e < kE; ++e)
    for (int64_t k = 0; k < kR; ++k)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o)
          g[(e * kR + k) * in + i] += kScaling * b[(e * out + o) * kR + k] * dw[(e * out + o) * in + i];
  return g;
}
std::vector<double> grad_b(const std::vector<double>& dw, const std::vector<double>& a, int64_t out, int64_t in) {
  std::vector<double> g(static_cast<size_t>(kE * out * kR), 0.0);
  for (int e = 0; e < kE; ++e)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < kR; ++k)
        for (int64_t i = 0; i < in; ++i)
          g[(e * out + o) * kR + k] += kScaling * dw[(e * out + o) * in + i] * a[(e * kR + k) * in + i];
  return g;
}

TEST(ExpertLora, EachExpertComputesItsMergedWeightAndTheFactorsGradientsFollowFromIt) {
  CpuDevice dev;
  const MoeShape shape{kC, kF, kE, kK, true};
  MoeMlp adapted("layers.0.moe", shape);
  adapted.freeze();
  LoraTargets t;
  t.options.r = kR;
  t.options.scaling = kScaling;
  t.sites = {"layers.0.moe.gate_up", "layers.0.moe.down"};
  ASSERT_EQ(adapted.add_lora(t), 2);
  std::map<std::string, Parameter*> p = by_name(adapted);
  ASSERT_EQ(p.size(), 7u);
  EXPECT_EQ(p.at("layers.0.moe.gate_up.lora_A")->shape, (Shape{kE, kR, kC}));
  EXPECT_EQ(p.at("layers.0.moe.gate_up.lora_B")->shape, (Shape{kE, 2 * kF, kR}));
  EXPECT_EQ(p.at("layers.0.moe.down.lora_A")->shape, (Shape{kE, kR, kF}));
  EXPECT_EQ(p.at("layers.0.moe.down.lora_B")->shape, (Shape{kE, kC, kR}));
  uint64_t seed = 40;
  for (auto& [name, q] : p) {
    q->value = randn(dev, q->shape, ++seed, 0.6f);  // B too: not PEFT's zeros, so both factors matter
    if (q->trainable) q->grad = Tensor::zeros(q->shape, DType::F32, dev, "grad");
  }
  EXPECT_FALSE(p.at("layers.0.moe.gate_up.weight")->trainable);
  EXPECT_TRUE(p.at("layers.0.moe.down.lora_B")->trainable && p.at("layers.0.moe.down.lora_B")->adapter);

  MoeMlp plain("layers.0.moe", shape);
  std::map<std::string, Parameter*> q = by_name(plain);
  const auto v = [&](const std::string& n) { return to_double(p.at("layers.0.moe." + n)->value); };
  const std::vector<double> gate_up = merged(v("gate_up.weight"), v("gate_up.lora_A"), v("gate_up.lora_B"), 2 * kF, kC);
  const std::vector<double> down = merged(v("down.weight"), v("down.lora_A"), v("down.lora_B"), kC, kF);
  q.at("layers.0.moe.router.weight")->value = from_double(dev, {kE, kC}, v("router.weight"));
  q.at("layers.0.moe.gate_up.weight")->value = from_double(dev, {kE, 2 * kF, kC}, gate_up);
  q.at("layers.0.moe.down.weight")->value = from_double(dev, {kE, kC, kF}, down);
  for (auto& [name, w] : q) w->grad = Tensor::zeros(w->shape, DType::F32, dev, "grad");

  const Tensor x = randn(dev, {kN, kC}, 90), dy = randn(dev, {kN, kC}, 91);
  Saved sa, sp;
  const Tensor ya = adapted.forward(x, sa), yp = plain.forward(x, sp);
  EXPECT_LT(rel_error(to_double(ya), to_double(yp)), 1e-5);
  const Tensor dxa = adapted.backward(dy, sa), dxp = plain.backward(dy, sp);
  EXPECT_LT(rel_error(to_double(dxa), to_double(dxp)), 1e-5);

  const std::vector<double> dgu = to_double(q.at("layers.0.moe.gate_up.weight")->grad);
  const std::vector<double> ddown = to_double(q.at("layers.0.moe.down.weight")->grad);
  const auto g = [&](const std::string& n) { return to_double(p.at("layers.0.moe." + n)->grad); };
  EXPECT_LT(rel_error(g("gate_up.lora_A"), grad_a(dgu, v("gate_up.lora_B"), 2 * kF, kC)), 1e-5);
  EXPECT_LT(rel_error(g("gate_up.lora_B"), grad_b(dgu, v("gate_up.lora_A"), 2 * kF, kC)), 1e-5);
  EXPECT_LT(rel_error(g("down.lora_A"), grad_a(ddown, v("down.lora_B"), kC, kF)), 1e-5);
  EXPECT_LT(rel_error(g("down.lora_B"), grad_b(ddown, v("down.lora_A"), kC, kF)), 1e-5);
  // The frozen experts and router take none.
  for (const char* n : {"router.weight", "gate_up.weight", "down.weight"})
    EXPECT_FALSE(p.at(std::string("layers.0.moe.") + n)->grad.defined()) << n;
}

TEST(ExpertLora, OnlyTheSitesAskedAndPeftsInitialisation) {
  MoeMlp layer("layers.3.moe", MoeShape{kC, kF, kE, kK, false});
  layer.freeze();
  LoraTargets t;
  t.options.r = kR;
  t.options.init = spec::LoraInit::Random;
  t.sites = {"layers.3.moe.down", "layers.0.moe.gate_up"};
  EXPECT_EQ(layer.add_lora(t), 1);
  std::map<std::string, Parameter*> p = by_name(layer);
  EXPECT_EQ(p.count("layers.3.moe.gate_up.lora_A"), 0u);
  const Parameter& a = *p.at("layers.3.moe.down.lora_A");
  const Parameter& b = *p.at("layers.3.moe.down.lora_B");
  // PEFT's A (E r, in) and B (out, r E) are each one nn.Linear: kaiming-uniform over in, and (init false) over r E.
  EXPECT_EQ(a.init, Init::Uniform);
  EXPECT_FLOAT_EQ(a.bound, 1.0f / std::sqrt(static_cast<float>(kF)));
  EXPECT_EQ(b.init, Init::Uniform);
  EXPECT_FLOAT_EQ(b.bound, 1.0f / std::sqrt(static_cast<float>(kR * kE)));
  // PEFT's default: B zeros, so the first loss is the base model's.
  MoeMlp fresh("layers.3.moe", MoeShape{kC, kF, kE, kK, false});
  fresh.freeze();
  t.options.init = spec::LoraInit::Default;
  ASSERT_EQ(fresh.add_lora(t), 1);
  EXPECT_EQ(by_name(fresh).at("layers.3.moe.down.lora_B")->init, Init::Zeros);
  EXPECT_EQ(by_name(fresh).at("layers.3.moe.down.lora_A")->init, Init::Uniform);
}

}  // namespace
}  // namespace tandem::nn
