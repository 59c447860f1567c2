// LoRA adapters on the Llama and GPT blocks: the forward against W x + s B A x written out in double on fused
// projections (an adapter on q alone changes only q's rows), gradients of the adapters against central differences
// (frozen base, dropout on), the frozen base's missing gradients, PEFT's initialisations, the tensor-parallel shards
// of A and B, the dropout mask's independence from how a batch is cut into micro-batches, and Qwen2-MoE's shared
// expert.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "model_test_util.h"
#include "tandem/core/random_fill.h"
#include "tandem/device/cpu_device.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/llama.h"
#include "tandem/nn/models.h"
#include "test_util.h"

namespace tandem::nn {
namespace {

using testing::loss_of;
using testing::random_tokens;
using testing::small_llama;

// Every projection of a llama with `layers` layers.
std::set<std::string> all_llama_sites(int layers) {
  std::set<std::string> s;
  for (int i = 0; i < layers; ++i)
    for (const char* site : {"qkv.q", "qkv.k", "qkv.v", "o", "gate_up.gate", "gate_up.up", "down"})
      s.insert("layers." + std::to_string(i) + "." + site);
  return s;
}

LoraTargets targets(std::set<std::string> sites, spec::LoraInit init = spec::LoraInit::Random, float dropout = 0) {
  LoraTargets t;
  t.options.r = 3;
  t.options.scaling = 1.5f;
  t.options.dropout = dropout;
  t.options.init = init;
  t.sites = std::move(sites);
  return t;
}

std::map<std::string, Parameter*> by_name(const Model& m) {
  std::map<std::string, Parameter*> out;
  for (Parameter* p : m.parameters()) out[p->name] = p;
  return out;
}

TEST(Lora, AnAdapterOnQAloneChangesOnlyTheQRowsOfTheFusedProjection) {
  device::CpuDevice dev;
  // One Linear with q, k, v parts of 8, 4, 4 rows; adapters on q and v (r 3, s 1.5).
  auto qkv = std::make_unique<Linear>("qkv", 6, std::vector<int64_t>{8, 4, 4}, false);
  LoraOptions o;
  o.r = 3;
  o.scaling = 1.5f;
  o.init = spec::LoraInit::Random;
  qkv->freeze();
  qkv->add_lora(o, 0, "q");
  qkv->add_lora(o, 2, "v");
  Model m;
  m.add(std::move(qkv));
  m.materialize(dev, 3);
  const auto p = by_name(m);
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p.at("qkv.q.lora_A")->shape, (Shape{3, 6}));
  EXPECT_EQ(p.at("qkv.q.lora_B")->shape, (Shape{8, 3}));
  EXPECT_EQ(p.at("qkv.v.lora_B")->shape, (Shape{4, 3}));
  Tensor x = Tensor::empty({5, 6}, DType::F32, dev, "x");
  testing::fill_normal(x, 9);
  Saved saved;
  const Tensor y = m.layers()[0]->forward(x, saved);
  // Reference: y = x W^T, then + 1.5 (x A^T) B^T on rows [0, 8) (q) and [12, 16) (v).
  const float* w = p.at("qkv.weight")->value.f32();
  for (int64_t n = 0; n < 5; ++n)
    for (int64_t o_row = 0; o_row < 16; ++o_row) {
      double want = 0;
      for (int64_t i = 0; i < 6; ++i) want += static_cast<double>(x.f32()[n * 6 + i]) * w[o_row * 6 + i];
      const char* part = o_row < 8 ? "q" : o_row >= 12 ? "v" : nullptr;
      if (part) {
        const int64_t row = o_row < 8 ? o_row : o_row - 12;
        const float* a = p.at(std::string("qkv.") + part + ".lora_A")->value.f32();
        const float* b = p.at(std::string("qkv.") + part + ".lora_B")->value.f32();
        for (int64_t k = 0; k < 3; ++k) {
          double h = 0;
          for (int64_t i = 0; i < 6; ++i) h += static_cast<double>(x.f32()[n * 6 + i]) * a[k * 6 + i];
          want += 1.5 * h * b[row * 3 + k];
        }
      }
      EXPECT_NEAR(y.f32()[n * 16 + o_row], want, 1e-5) << "row " << n << ", output " << o_row;
    }
}

TEST(Lora, BuildersFreezeTheBaseAndAddAdaptersOnlyAtTheSitesAsked) {
  device::CpuDevice dev;  // outlives the model's tensors
  const LoraTargets t = targets({"layers.0.qkv.q", "layers.1.down"});
  Model m = build_llama(small_llama(), {}, &t);
  int adapters = 0;
  for (const Parameter* p : m.parameters()) {
    EXPECT_EQ(p->trainable, p->adapter) << p->name;
    adapters += p->adapter;
  }
  EXPECT_EQ(adapters, 4);
  const auto p = by_name(m);
  EXPECT_TRUE(p.count("layers.0.qkv.q.lora_A") && p.count("layers.1.down.lora_B"));
  EXPECT_EQ(p.at("layers.1.down.lora_A")->shape, (Shape{3, 24}));
  EXPECT_EQ(p.at("layers.1.down.lora_B")->shape, (Shape{16, 3}));
  // A site the model lacks is an error, not silently nothing.
  const LoraTargets missing = targets({"layers.7.o"});
  EXPECT_THROW(build_llama(small_llama(), {}, &missing), Error);
  // Frozen parameters get no gradient buffer view.
  m.materialize(dev, 1);
  EXPECT_FALSE(p.at("layers.0.qkv.weight")->grad.defined());
  EXPECT_TRUE(p.at("layers.0.qkv.q.lora_A")->grad.defined());
}

TEST(Lora, InitialisationIsPeftsFromTheSeed) {
  device::CpuDevice dev;
  // init_lora_weights true: A is torch's kaiming_uniform_(a = sqrt(5)), bound sqrt(3) gain / sqrt(fan_in) with
  // gain = sqrt(2 / (1 + 5)), i.e. 1 / sqrt(in); B zeros.
  const LoraTargets t = targets(all_llama_sites(2), spec::LoraInit::Default);
  Model m = build_llama(small_llama(), {}, &t);
  m.materialize(dev, 4);
  const auto p = by_name(m);
  const double gain = std::sqrt(2.0 / (1.0 + 5.0)), bound = std::sqrt(3.0) * gain / std::sqrt(16.0);
  const Tensor& a = p.at("layers.0.qkv.q.lora_A")->value;
  double largest = 0, sum = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(a.f32()[i])));
    sum += a.f32()[i];
  }
  EXPECT_LE(largest, bound * (1 + 1e-6));
  EXPECT_GE(largest, 0.8 * bound);  // 48 draws of U(-b, b): the largest is within 20% of b
  EXPECT_LT(std::fabs(sum / static_cast<double>(a.numel())), 0.35 * bound);
  for (const char* b : {"layers.0.qkv.q.lora_B", "layers.1.down.lora_B"})
    for (float v : p.at(b)->value.to_host_floats()) EXPECT_EQ(v, 0.0f) << b;
  // down's A has fan_in 24 (the MLP width).
  for (float v : p.at("layers.0.down.lora_A")->value.to_host_floats())
    EXPECT_LE(std::fabs(v), 1.0 / std::sqrt(24.0) * (1 + 1e-6));
  // init_lora_weights false: B as nn.Linear(r, out) initialises it, bound 1 / sqrt(r); not zero.
  const LoraTargets r = targets(all_llama_sites(2), spec::LoraInit::Random);
  Model m2 = build_llama(small_llama(), {}, &r);
  m2.materialize(dev, 4);
  const std::vector<float> b = by_name(m2).at("layers.0.qkv.q.lora_B")->value.to_host_floats();
  double b_max = 0;
  for (float v : b) b_max = std::max(b_max, std::fabs(static_cast<double>(v)));
  EXPECT_GT(b_max, 0.5 / std::sqrt(3.0));
  EXPECT_LE(b_max, 1.0 / std::sqrt(3.0) * (1 + 1e-6));
  // The same seed draws the same A whichever init B gets.
  EXPECT_EQ(a.to_host_floats(), by_name(m2).at("layers.0.qkv.q.lora_A")->value.to_host_floats());
}

// Directional derivatives of the loss along random directions over the adapters only (the base is frozen, so the
// adapters are all the model's gradient), against central differences.
void check_adapter_gradients(Model& m, const Tensor& x, const Tensor& y, double h = 1e-3, const Batch& batch = {}) {
  std::vector<Parameter*> adapters;
  for (Parameter* p : m.parameters())
    if (p->trainable) adapters.push_back(p);
  ASSERT_FALSE(adapters.empty());
  for (Parameter* p : adapters) p->grad.fill_zero();
  loss_of(m, x, y, true, false, batch);
  for (uint64_t trial = 0; trial < 3; ++trial) {
    double analytic = 0;
    std::vector<std::vector<float>> base, dir;
    uint64_t k = 0;
    for (Parameter* p : adapters) {
      base.push_back(p->value.to_host_floats());
      std::vector<float> u(base.back().size());
      for (size_t i = 0; i < u.size(); ++i) u[i] = normal_at(17, trial, k++);
      const std::vector<float> g = p->grad.to_host_floats();
      for (size_t i = 0; i < u.size(); ++i) analytic += static_cast<double>(g[i]) * u[i];
      dir.push_back(std::move(u));
    }
    auto shifted = [&](double s) {
      for (size_t j = 0; j < adapters.size(); ++j) {
        std::vector<float> v(base[j].size());
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(base[j][i] + s * dir[j][i]);
        adapters[j]->value.copy_from_host(v.data());
      }
      return loss_of(m, x, y, false, false, batch);
    };
    const double numeric = (shifted(h) - shifted(-h)) / (2 * h);
    shifted(0);
    EXPECT_NEAR(analytic, numeric, 2e-3 * std::fabs(numeric) + 1e-4) << "direction " << trial;
  }
}

TEST(Lora, AdapterGradientsMatchFiniteDifferencesOnEveryLlamaProjection) {
  device::CpuDevice dev;
  const LoraTargets t = targets(all_llama_sites(2));
  Model m = build_llama(small_llama(), {}, &t);
  m.materialize(dev, 7);
  const Tensor x = random_tokens(dev, {2, 6}, 13, 1);
  const Tensor y = random_tokens(dev, {12}, 13, 2);
  check_adapter_gradients(m, x, y, 5e-4);
  // The frozen base accumulated nothing: its slices of the gradient buffer stay zero.
  const std::vector<float> grads = m.flat_grads().to_host_floats();
  int64_t offset = 0;
  for (const Parameter* p : m.parameters()) {
    const int64_t n = shape_numel(p->shape);
    if (!p->trainable) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(grads[static_cast<size_t>(offset + i)], 0.0f) << p->name;
    }
    offset += n;
  }
}

TEST(Lora, AdapterGradientsMatchFiniteDifferencesOnGpt2sFusedQkvAndMlp) {
  device::CpuDevice dev;
  GptConfig g{13, 6, 16, 2, 4, false};
  LoraTargets t = targets({"blocks.0.qkv", "blocks.0.proj", "blocks.1.fc", "blocks.1.out"});
  Model m = build_gpt(g, {}, &t);
  m.materialize(dev, 8);
  const Tensor x = random_tokens(dev, {2, 6}, 13, 3);
  const Tensor y = random_tokens(dev, {12}, 13, 4);
  check_adapter_gradients(m, x, y);
}

// Samples 2 and 3 of a step's micro-batch x (4, 6) run as a micro-batch of their own (first_sample 2) give the rows
// they gave in the batch of 4: the dropout masks follow the sample, not the micro-batch. Returns the batch's rows.
std::vector<float> expect_tail_rows_as_in_the_batch(Model& m, const Tensor& x, const Batch& batch) {
  const auto forward = [&](const Tensor& in, const Batch& b) {
    std::vector<Saved> saved;
    return m.forward_range(0, m.layers().size(), in, saved, false, nullptr, b).to_host_floats();
  };
  const std::vector<float> whole = forward(x, batch);
  Batch tail_batch = batch;
  tail_batch.samples.first_sample = 2;
  const Tensor tail = Tensor::empty({2, 6}, DType::I32, x.device(), "tail");
  std::copy(x.i32() + 12, x.i32() + 24, tail.i32());
  const std::vector<float> part = forward(tail, tail_batch);
  EXPECT_EQ(part.size() * 2, whole.size());
  for (size_t i = 0; i < part.size() && part.size() * 2 == whole.size(); ++i)
    EXPECT_EQ(part[i], whole[part.size() + i]) << i;
  return whole;
}

TEST(Lora, DropoutGradientsMatchFiniteDifferencesAndTheMaskFollowsTheSampleNotTheMicroBatch) {
  device::CpuDevice dev;
  const LoraTargets t = targets(all_llama_sites(2), spec::LoraInit::Random, 0.3f);
  Model m = build_llama(small_llama(), {}, &t);
  m.materialize(dev, 7);
  Batch batch;
  batch.training = true;
  batch.samples = {11, 2, 0};  // seed 11, step 2, from sample 0
  const Tensor x = random_tokens(dev, {4, 6}, 13, 1);
  const Tensor y = random_tokens(dev, {24}, 13, 2);
  check_adapter_gradients(m, x, y, 5e-4, batch);

  const std::vector<float> whole = expect_tail_rows_as_in_the_batch(m, x, batch);
  const auto forward = [&](const Tensor& in, const Batch& b) {
    std::vector<Saved> saved;
    return m.forward_range(0, m.layers().size(), in, saved, false, nullptr, b).to_host_floats();
  };
  // Another step draws another mask.
  Batch next = batch;
  next.samples.step = 3;
  EXPECT_NE(forward(x, next), whole);
  // Outside training no element is dropped: the forward of the same weights without dropout.
  Batch evaluation = batch;
  evaluation.training = false;
  const LoraTargets plain = targets(all_llama_sites(2), spec::LoraInit::Random, 0.0f);
  Model m0 = build_llama(small_llama(), {}, &plain);
  m0.materialize(dev, 7);
  std::vector<Saved> saved0;
  EXPECT_EQ(forward(x, evaluation), m0.forward(x, saved0).to_host_floats());
}

// Qwen2-MoE's shared expert (layer 0 sparse, layer 1 dense): adapters on its gate and up rows, its down projection
// and its gate, with dropout; their gradients against central differences, and the masks keyed by the sample, so that
// the last two samples run alone give the rows they gave in the whole batch.
TEST(Lora, SharedExpertAdaptersGradientsAndMasksOfAQwen2Moe) {
  device::CpuDevice dev;
  LlamaConfig c = small_llama();
  c.family = spec::LlamaFamily::Qwen2Moe;
  c.moe.num_experts = 4;
  c.moe.num_experts_per_tok = 2;
  c.moe.moe_intermediate_size = 8;
  c.moe.shared_expert_intermediate_size = 12;
  c.moe.mlp_only_layers = {1};
  const LoraTargets t = targets({"layers.0.moe.shared_gate_up.gate", "layers.0.moe.shared_gate_up.up",
                                 "layers.0.moe.shared_down", "layers.0.moe.shared_expert_gate", "layers.1.down"},
                                spec::LoraInit::Random, 0.3f);
  Model m = build_llama(c, {}, &t);
  m.materialize(dev, 7);
  Batch batch;
  batch.training = true;
  batch.samples = {11, 2, 0};
  const Tensor x = random_tokens(dev, {4, 6}, 13, 1);
  const Tensor y = random_tokens(dev, {24}, 13, 2);
  check_adapter_gradients(m, x, y, 5e-4, batch);
  expect_tail_rows_as_in_the_batch(m, x, batch);
}

TEST(Lora, TensorParallelShardsOfAAndB) {
  // Slot 1 of 2: column-parallel projections keep A whole and split B by rows (each fused block separately);
  // row-parallel ones split A by columns and keep B whole.
  struct NoReducer final : TpReducer {
    void sum(const Tensor&) override {}
    void max(const Tensor&) override {}
  } reducer;
  const LoraTargets t = targets(all_llama_sites(1));
  LlamaConfig c = small_llama();
  c.num_hidden_layers = 1;
  c.vocab_size = 14;  // divisible by tp
  Model m = build_llama(c, TpSlot{1, 2, &reducer}, &t);
  const auto p = by_name(m);
  const auto expect = [&](const std::string& name, Shape local, Shape global, bool sharded) {
    const Parameter& q = *p.at(name);
    EXPECT_EQ(q.shape, local) << name;
    EXPECT_EQ(q.global_shape, global) << name;
    EXPECT_EQ(q.shard.sharded(), sharded) << name;
  };
  expect("layers.0.qkv.q.lora_A", {3, 16}, {3, 16}, false);
  expect("layers.0.qkv.q.lora_B", {8, 3}, {16, 3}, true);
  expect("layers.0.qkv.k.lora_B", {4, 3}, {8, 3}, true);
  expect("layers.0.gate_up.up.lora_B", {12, 3}, {24, 3}, true);
  expect("layers.0.o.lora_A", {3, 8}, {3, 16}, true);
  expect("layers.0.o.lora_B", {16, 3}, {16, 3}, false);
  expect("layers.0.down.lora_A", {3, 12}, {3, 24}, true);
  // Slot 1's rows of k's B are rows 4..7 of the logical (8, 3); its columns of o's A are columns 8..15.
  EXPECT_EQ(p.at("layers.0.qkv.k.lora_B")->shard.global_index(0), 4 * 3);
  EXPECT_EQ(p.at("layers.0.o.lora_A")->shard.global_index(0), 8);
  EXPECT_EQ(p.at("layers.0.o.lora_A")->shard.global_index(8), 16 + 8);
}

}  // namespace
}  // namespace tandem::nn
