// Models: parameter counts and names, layout-free initialisation, model-level gradient checks, and
// activation checkpointing giving the same gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "model_test_util.h"
#include "tandem/core/philox.h"
#include "tandem/device/cpu_device.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/loss.h"
#include "tandem/nn/models.h"
#include "test_util.h"

namespace tandem::nn {
namespace {

using testing::check_directional_derivatives;
using testing::loss_of;
using testing::random_tokens;

TEST(Gpt, ParameterCountOf1p6B) {
  GptConfig c{50304, 1024, 1600, 48, 25};
  EXPECT_EQ(gpt_parameter_count(c), 1638172800);
  EXPECT_EQ(build_gpt(c).num_parameters(), 1638172800);  // shapes only: nothing is allocated
}

TEST(Gpt, ParameterNamesFollowPyTorchReference) {
  Model m = build_gpt({11, 8, 12, 2, 3});
  std::set<std::string> names;
  for (Parameter* p : m.parameters()) names.insert(p->name);
  for (const char* n : {"wte.weight", "wpe.weight", "blocks.0.ln1.weight", "blocks.0.qkv.weight", "blocks.0.qkv.bias",
                        "blocks.1.proj.weight", "blocks.1.fc.bias", "blocks.1.out.weight", "blocks.1.ln2.bias",
                        "lnf.weight", "head.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("head.bias"));
}

TEST(Init, KeyedByNameAndIndexOnly) {
  device::CpuDevice dev;
  Model a = build_mlp({{6, 5, 3}, "relu"});
  Model b = build_mlp({{6, 5, 3}, "relu"});
  a.materialize(dev, 42);
  b.materialize(dev, 42);
  for (size_t i = 0; i < a.parameters().size(); ++i) {
    const Parameter& p = *a.parameters()[i];
    EXPECT_EQ(0, std::memcmp(p.value.raw(), b.parameters()[i]->value.raw(), p.value.nbytes())) << p.name;
  }
  // A slice initialised alone equals the same slice of the whole tensor (what a shard on another device does).
  const Parameter& w = *a.parameters()[0];  // layers.0.weight (5, 6)
  Tensor part = Tensor::empty({7}, DType::F32, dev, "part");
  initialize_parameter(w, part, 42, 11);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(part.f32()[i], w.value.f32()[11 + i]);
}

// FP8 (spec/fp8.h): the gpt's four projections per block run in FP8, the loss and gradients stay close to fp32's
// (a few e4m3 steps of noise) and are not fp32's; fp8.min_features keeps projections in fp32.
TEST(Fp8, GptFollowsFp32WithItsProjectionsInFp8) {
  device::CpuDevice dev;
  const GptConfig cfg{64, 16, 32, 2, 4};
  spec::Fp8Config fp8;
  fp8.enabled = true;
  Model plain = build_gpt(cfg), quantized = build_gpt(cfg, {}, nullptr, fp8);
  EXPECT_EQ(plain.fp8_use().fp8, 0);
  EXPECT_EQ(quantized.fp8_use().fp8, 8);
  EXPECT_EQ(quantized.fp8_use().projections, 8);
  plain.materialize(dev, 5);
  quantized.materialize(dev, 5);
  const Tensor x = random_tokens(dev, {4, 16}, 64, 1), y = random_tokens(dev, {64}, 64, 2);
  plain.zero_grad();
  quantized.zero_grad();
  const double want = loss_of(plain, x, y, true), got = loss_of(quantized, x, y, true);
  EXPECT_NE(got, want);
  EXPECT_NEAR(got, want, 1e-2 * want);
  // Each projection weight's gradient points where fp32's does.
  for (size_t i = 0; i < plain.parameters().size(); ++i) {
    const Parameter& a = *plain.parameters()[i];
    const Parameter& b = *quantized.parameters()[i];
    if (a.name.find("weight") == std::string::npos || a.value.rank() != 2) continue;
    double dot = 0, na = 0, nb = 0;
    for (int64_t j = 0; j < a.grad.numel(); ++j) {
      dot += static_cast<double>(a.grad.f32()[j]) * b.grad.f32()[j];
      na += static_cast<double>(a.grad.f32()[j]) * a.grad.f32()[j];
      nb += static_cast<double>(b.grad.f32()[j]) * b.grad.f32()[j];
    }
    EXPECT_GT(dot / std::sqrt(na * nb), 0.99) << a.name;
  }
  fp8.min_features = 64;  // qkv (32 -> 96), proj (32 -> 32), fc (32 -> 128), out (128 -> 32): none has 64 of both
  EXPECT_EQ(build_gpt(cfg, {}, nullptr, fp8).fp8_use().fp8, 0);
}

// A tensor-parallel slot whose share of a projection is not a multiple of 16 features cannot run FP8 products: the
// build says which projection and what to change.
TEST(Fp8, ASlotOfFewerThanSixteenFeaturesIsRefused) {
  spec::Fp8Config fp8;
  fp8.enabled = true;
  // tp 4 of dim 32: proj's 8 inputs a slot.
  nn::TpSlot tp{0, 4, nullptr};
  EXPECT_HAS(testing::error_of([&] {
               build_gpt({64, 16, 32, 1, 4}, tp, nullptr, fp8);
             }),
             "FP8 products need multiples of 16 features");
}

TEST(Init, Gpt2Statistics) {
  device::CpuDevice dev;
  Model m = build_gpt({64, 16, 32, 1, 4});
  m.materialize(dev, 1);
  for (Parameter* p : m.parameters()) {
    const float* v = p->value.f32();
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < p->value.numel(); ++i) {
      s += v[i];
      s2 += v[i] * v[i];
    }
    const double n = static_cast<double>(p->value.numel());
    if (p->init == Init::Normal) {
      EXPECT_NEAR(std::sqrt(s2 / n), 0.02, 0.004) << p->name;
    } else if (p->init == Init::Ones) {
      EXPECT_EQ(s, n) << p->name;
    } else {
      EXPECT_EQ(s2, 0.0) << p->name;
    }
  }
}

TEST(GradCheck, Mlp) {
  device::CpuDevice dev;
  Model m = build_mlp({{7, 9, 6, 4}, "gelu"});
  m.materialize(dev, 3);
  for (Parameter* p : m.parameters()) testing::fill_normal(p->value, tandem::hash_name(p->name), 0.5f);
  Tensor x = Tensor::empty({5, 7}, DType::F32, dev, "x");
  testing::fill_normal(x, 5);
  Tensor y = random_tokens(dev, {5}, 4, 6);
  check_directional_derivatives(m, x, y);
}

TEST(GradCheck, Gpt) {
  device::CpuDevice dev;
  Model m = build_gpt({13, 6, 12, 2, 3});
  m.materialize(dev, 3);
  // Larger weights than the 0.02 init so every path (attention, LN, GELU) contributes visibly.
  for (Parameter* p : m.parameters())
    if (p->init == Init::Normal) testing::fill_normal(p->value, tandem::hash_name(p->name), 0.3f);
  Tensor x = random_tokens(dev, {2, 5}, 13, 7);
  Tensor y = random_tokens(dev, {10}, 13, 8);
  check_directional_derivatives(m, x, y);
}

// The head tied to the embedding: one parameter fewer (V x C), the head reads the table's memory, and the table's
// gradient is the sum of the untied model's two gradients (table and head) at the same weights.
TEST(Gpt, TiedEmbeddingsShareValueAndSumGradients) {
  device::CpuDevice dev;
  const GptConfig untied_config{13, 6, 12, 2, 3};
  GptConfig tied_config = untied_config;
  tied_config.tie_word_embeddings = true;
  EXPECT_EQ(gpt_parameter_count(tied_config), gpt_parameter_count(untied_config) - 13 * 12);
  Model untied = build_gpt(untied_config), tied = build_gpt(tied_config);
  EXPECT_EQ(tied.num_parameters(), gpt_parameter_count(tied_config));
  ASSERT_EQ(tied.replicas().size(), 1u);
  EXPECT_EQ(tied.replicas()[0]->name, "wte.weight");  // the head's weight: a replica of the table
  untied.materialize(dev, 3);
  tied.materialize(dev, 3);
  std::map<std::string, Parameter*> u, t;
  for (Parameter* p : untied.parameters()) u[p->name] = p;
  for (Parameter* p : tied.parameters()) t[p->name] = p;
  EXPECT_EQ(t.size() + 1, u.size());
  EXPECT_FALSE(t.count("head.weight"));
  EXPECT_EQ(tied.replicas()[0]->value.raw(), t.at("wte.weight")->value.raw());
  for (auto& [name, p] : t) {
    testing::fill_normal(p->value, tandem::hash_name(name), 0.3f);
    std::memcpy(u.at(name)->value.raw(), p->value.raw(), p->value.nbytes());
  }
  std::memcpy(u.at("head.weight")->value.raw(), t.at("wte.weight")->value.raw(), t.at("wte.weight")->value.nbytes());
  Tensor x = random_tokens(dev, {2, 5}, 13, 7);
  Tensor y = random_tokens(dev, {10}, 13, 8);
  untied.zero_grad();
  tied.zero_grad();
  EXPECT_EQ(loss_of(untied, x, y, true), loss_of(tied, x, y, true));
  for (auto& [name, p] : t) {
    const Tensor& g = p->grad;
    for (int64_t i = 0; i < g.numel(); ++i) {
      float want = u.at(name)->grad.f32()[i];
      if (name == "wte.weight") want += u.at("head.weight")->grad.f32()[i];
      ASSERT_NEAR(g.f32()[i], want, 1e-6f * (1 + std::fabs(want))) << name << " element " << i;
    }
  }
}

TEST(ActivationCheckpointing, SameGradientsAndLessMemory) {
  device::CpuDevice dev;
  Model m = build_gpt({17, 16, 16, 3, 2});
  m.materialize(dev, 9);
  Tensor x = random_tokens(dev, {2, 16}, 17, 1);
  Tensor y = random_tokens(dev, {32}, 17, 2);
  const uint64_t base = dev.live_bytes();

  m.zero_grad();
  dev.reset_peak();
  const double l1 = loss_of(m, x, y, true, false);
  const uint64_t peak_plain = dev.peak_bytes() - base;
  std::vector<float> g1(m.flat_grads().f32(), m.flat_grads().f32() + m.flat_grads().numel());
  EXPECT_EQ(dev.live_bytes(), base);  // everything a step allocates is freed

  m.zero_grad();
  dev.reset_peak();
  const double l2 = loss_of(m, x, y, true, true);
  const uint64_t peak_recompute = dev.peak_bytes() - base;
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(0, std::memcmp(g1.data(), m.flat_grads().f32(), g1.size() * 4));
  EXPECT_LT(peak_recompute, peak_plain);
}

TEST(Model, DuplicateParameterNamesRejected) {
  Model m;
  m.emplace<Linear>("fc", 3, 4);
  EXPECT_THROW(m.emplace<Linear>("fc", 4, 2), Error);
}

}  // namespace
}  // namespace tandem::nn
