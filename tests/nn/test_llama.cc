// The Llama decoder: parameter counts and names, tensor-parallel shards of the fused projections, model-level
// gradient checks (grouped-query, multi-head, biased, scaled rotary, Qwen3's per-head norms), activation checkpointing
// and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "model_test_util.h"
#include "tandem/core/philox.h"
#include "tandem/device/cpu_device.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/llama.h"
#include "tandem/nn/loss.h"
#include "test_util.h"

namespace tandem::nn {
namespace {

using testing::check_directional_derivatives;
using testing::loss_of;
using testing::random_tokens;

// Half of test_models.cc's step: the central difference's h^2 error is larger here (it shrinks 4x per halving).
constexpr double kStep = 5e-4;

// A small decoder: C 16, 4 query heads over 2 kv heads of D 4, F 24, V 13.
LlamaConfig small(int heads = 4, int kv_heads = 2) {
  LlamaConfig c;
  c.vocab_size = 13;
  c.seq_len = 6;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  return c;
}

std::map<std::string, Parameter*> by_name(const Model& m) {
  std::map<std::string, Parameter*> out;
  for (Parameter* p : m.parameters()) out[p->name] = p;
  return out;
}

// transformers' LlamaForCausalLM forward written out in double, one loop per formula, from the model's parameters:
// rotate_half on q and k only, query head h attending with kv head h / (H / Hkv), silu(gate) * up; for Qwen3, each
// q and k head first RMS-normalised over its D with q_norm's or k_norm's gain.
std::vector<double> reference_logits(const LlamaConfig& c, const std::map<std::string, Parameter*>& p,
                                     const Tensor& tokens) {
  const int64_t B = tokens.dim(0), T = tokens.dim(1), C = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim ? c.head_dim : C / H;
  const int64_t W = (H + 2 * KV) * D;
  auto w = [&](const std::string& name) { return p.at(name)->value.f32(); };
  auto rmsnorm = [&](const std::vector<double>& x, const float* g) {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < B * T; ++r) {
      double ms = 0;
      for (int64_t i = 0; i < C; ++i) ms += x[r * C + i] * x[r * C + i] / C;
      for (int64_t i = 0; i < C; ++i) y[r * C + i] = g[i] * x[r * C + i] / std::sqrt(ms + c.rms_norm_eps);
    }
    return y;
  };
  // y (B T, out) = x (B T, in) W^T + b
  auto linear = [&](const std::vector<double>& x, int64_t in, const float* m, int64_t out, const float* b) {
    std::vector<double> y(static_cast<size_t>(B * T * out));
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double acc = b ? b[o] : 0.0;
        for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * m[o * in + i];
        y[r * out + o] = acc;
      }
    return y;
  };
  std::vector<double> x(static_cast<size_t>(B * T * C));
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t i = 0; i < C; ++i) x[r * C + i] = w("embed.weight")[tokens.i32()[r] * C + i];
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string pre = "layers." + std::to_string(l) + ".";
    std::vector<double> qkv = linear(rmsnorm(x, w(pre + "attn_norm.weight")), C, w(pre + "qkv.weight"), W,
                                     qkv_biased(c) ? w(pre + "qkv.bias") : nullptr);
    for (int64_t r = 0; r < B * T && spec::qk_norm(c); ++r)
      for (int64_t head = 0; head < H + KV; ++head) {  // q heads with q_norm, then k heads with k_norm
        const float* g = w(pre + (head < H ? "q_norm.weight" : "k_norm.weight"));
        double* e = &qkv[r * W + head * D];
        double ms = 0;
        for (int64_t i = 0; i < D; ++i) ms += e[i] * e[i] / D;
        for (int64_t i = 0; i < D; ++i) e[i] = g[i] * e[i] / std::sqrt(ms + c.rms_norm_eps);
      }
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t head = 0; head < H + KV; ++head)  // q heads, then k heads
        for (int64_t i = 0; i < D / 2; ++i) {
          const double angle = static_cast<double>(r % T) / std::pow(c.rope_theta, 2.0 * i / D);
          double* e = &qkv[r * W + head * D];
          const double a = e[i], b = e[i + D / 2];
          e[i] = a * std::cos(angle) - b * std::sin(angle);
          e[i + D / 2] = b * std::cos(angle) + a * std::sin(angle);
        }
    std::vector<double> att(static_cast<size_t>(B * T * H * D), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t g = h / (H / KV);
          const double* q = &qkv[(b * T + t) * W + h * D];
          std::vector<double> s(static_cast<size_t>(t + 1));
          double mx = -1e300, sum = 0;
          for (int64_t u = 0; u <= t; ++u) {
            const double* k = &qkv[(b * T + u) * W + (H + g) * D];
            double dot = 0;
            for (int64_t i = 0; i < D; ++i) dot += q[i] * k[i];
            s[u] = dot / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, s[u]);
          }
          for (int64_t u = 0; u <= t; ++u) sum += std::exp(s[u] - mx);
          for (int64_t u = 0; u <= t; ++u) {
            const double* v = &qkv[(b * T + u) * W + (H + KV + g) * D];
            for (int64_t i = 0; i < D; ++i) att[(b * T + t) * H * D + h * D + i] += std::exp(s[u] - mx) / sum * v[i];
          }
        }
    const std::vector<double> o = linear(att, H * D, w(pre + "o.weight"), C, o_biased(c) ? w(pre + "o.bias") : nullptr);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const std::vector<double> gu =
        linear(rmsnorm(x, w(pre + "mlp_norm.weight")), C, w(pre + "gate_up.weight"), 2 * F, nullptr);
    std::vector<double> a(static_cast<size_t>(B * T * F));
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t j = 0; j < F; ++j) {
        const double g = gu[r * 2 * F + j], u = gu[r * 2 * F + F + j];
        a[r * F + j] = g / (1 + std::exp(-g)) * u;
      }
    const std::vector<double> d = linear(a, F, w(pre + "down.weight"), C, nullptr);
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
  }
  return linear(rmsnorm(x, w("norm.weight")), C, w("head.weight"), V, nullptr);
}

TEST(Llama, ForwardMatchesTransformersFormulas) {
  device::CpuDevice dev;
  for (const int kv : {2, 4, 1}) {
    LlamaConfig c = small(4, kv);
    c.attention_bias = true;
    c.rope_theta = 100.0;  // fast rotations: positions 0..5 turn visibly
    Model m = build_llama(c);
    m.materialize(dev, 11);
    for (Parameter* p : m.parameters())
      testing::fill_normal(p->value, tandem::hash_name(p->name), p->init == Init::Normal ? 0.3f : 0.5f);
    Tensor x = random_tokens(dev, {2, 6}, 13, 12);
    std::vector<Saved> saved;
    const Tensor logits = m.forward(x, saved);
    ASSERT_EQ(logits.shape(), Shape({2, 6, 13}));
    EXPECT_LT(testing::rel_error(testing::to_double(logits), reference_logits(c, by_name(m), x)), 2e-6)
        << kv << " kv heads";
  }
  // Qwen3: heads of 6 where C / H is 4, each q and k head normalised before the rotation.
  LlamaConfig q = small(4, 2);
  q.family = spec::LlamaFamily::Qwen3;
  q.head_dim = 6;
  q.attention_bias = true;
  q.rope_theta = 100.0;
  Model m = build_llama(q);
  m.materialize(dev, 11);
  for (Parameter* p : m.parameters())
    testing::fill_normal(p->value, tandem::hash_name(p->name), p->init == Init::Normal ? 0.3f : 0.5f);
  Tensor x = random_tokens(dev, {2, 6}, 13, 12);
  std::vector<Saved> saved;
  EXPECT_LT(testing::rel_error(testing::to_double(m.forward(x, saved)), reference_logits(q, by_name(m), x)), 2e-6);
}

TEST(Llama, ParameterCountMatchesTheBuiltModel) {
  std::vector<LlamaConfig> configs;
  configs.push_back(small());      // grouped-query
  configs.push_back(small(4, 4));  // multi-head
  configs.push_back(small(4, 1));  // multi-query
  LlamaConfig biased = small();
  biased.attention_bias = true;
  configs.push_back(biased);
  LlamaConfig wide = small();
  wide.head_dim = 6;  // H D = 24 != C
  configs.push_back(wide);
  LlamaConfig tied = small();
  tied.tie_word_embeddings = true;
  configs.push_back(tied);
  LlamaConfig qwen3 = wide;
  qwen3.family = spec::LlamaFamily::Qwen3;  // q_norm and k_norm: 2 D a block
  configs.push_back(qwen3);
  for (const LlamaConfig& c : configs) {
    EXPECT_EQ(build_llama(c).num_parameters(), llama_parameter_count(c))
        << c.num_attention_heads << " heads " << c.num_key_value_heads << " kv heads, head_dim " << c.head_dim;
  }
  // By hand for the grouped-query one: V C + L (2C + 32*16 + 16*16 + 3*24*16) + C + V C.
  EXPECT_EQ(llama_parameter_count(small()), 13 * 16 + 2 * (32 + 32 * 16 + 16 * 16 + 3 * 24 * 16) + 16 + 13 * 16);
}

TEST(Llama, ParameterCountOfLlama32_1B) {
  LlamaConfig c;
  c.vocab_size = 128256;
  c.seq_len = 2048;
  c.hidden_size = 2048;
  c.intermediate_size = 8192;
  c.num_hidden_layers = 16;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.max_position_embeddings = 131072;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = spec::RopeType::Llama3;
  c.rope_scaling.factor = 32.0;
  c.tie_word_embeddings = true;
  EXPECT_EQ(llama_parameter_count(c), 1235814400);
  EXPECT_EQ(build_llama(c).num_parameters(), 1235814400);  // shapes only: nothing is allocated
  c.tie_word_embeddings = false;
  EXPECT_EQ(llama_parameter_count(c), 1235814400 + 128256 * 2048);
  EXPECT_EQ(build_llama(c).num_parameters(), 1235814400 + 128256 * 2048);  // shapes only: nothing is allocated
}

TEST(Llama, ParameterNamesAndShapes) {
  LlamaConfig c = small();
  c.qkv_bias = true;
  const Model m = build_llama(c);
  const auto params = by_name(m);
  const std::map<std::string, Shape> want = {{"embed.weight", {13, 16}},
                                             {"layers.0.attn_norm.weight", {16}},
                                             {"layers.0.qkv.weight", {32, 16}},
                                             {"layers.0.qkv.bias", {32}},
                                             {"layers.0.o.weight", {16, 16}},
                                             {"layers.1.mlp_norm.weight", {16}},
                                             {"layers.1.gate_up.weight", {48, 16}},
                                             {"layers.1.down.weight", {16, 24}},
                                             {"norm.weight", {16}},
                                             {"head.weight", {13, 16}}};
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_EQ(params.at(name)->shape, shape) << name;
  }
  EXPECT_FALSE(params.count("layers.0.o.bias"));
  EXPECT_FALSE(params.count("head.bias"));
  EXPECT_EQ(params.size(), 3 + 2 * 7);
  // One layer for the embedding, one per block, one for norm and head: pipeline stages cut between blocks.
  ASSERT_EQ(m.layers().size(), 4u);
  EXPECT_EQ(m.layers()[1]->name(), "layers.0");
  for (Parameter* p : m.parameters()) {
    const bool gain_or_bias = p->name.find("norm") != std::string::npos || p->name.find("bias") != std::string::npos;
    EXPECT_EQ(p->decay, !gain_or_bias) << p->name;
    EXPECT_EQ(p->init, p->name.find("norm") != std::string::npos   ? Init::Ones
                       : p->name.find("bias") != std::string::npos ? Init::Zeros
                                                                   : Init::Normal)
        << p->name;
  }
}

// Each tp slot's qkv holds its query heads, then its kv heads of k, then of v; gate_up its gate columns then its up
// columns; the rows are the ones the whole tensor holds there, so any layout initialises alike.
TEST(Llama, TensorParallelShardsHoldTheirHeads) {
  device::CpuDevice dev;
  LlamaConfig c = small(4, 2);
  c.vocab_size = 14;  // a multiple of tp
  c.qkv_bias = true;
  Model whole = build_llama(c);
  whole.materialize(dev, 5);
  const auto w = by_name(whole);
  const int64_t D = 4, C = 16, F = 24;
  for (int rank = 0; rank < 2; ++rank) {
    Model slot = build_llama(c, TpSlot{rank, 2, nullptr});
    slot.materialize(dev, 5);
    const auto s = by_name(slot);
    // qkv rows of this slot: q heads [2 rank, 2 rank + 2), k head rank, v head rank.
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < 2 * D; ++r) rows.push_back(rank * 2 * D + r);
    for (int64_t r = 0; r < D; ++r) rows.push_back(4 * D + rank * D + r);
    for (int64_t r = 0; r < D; ++r) rows.push_back(6 * D + rank * D + r);
    const Tensor& q = s.at("layers.1.qkv.weight")->value;
    ASSERT_EQ(q.shape(), Shape({4 * D, C}));
    for (size_t r = 0; r < rows.size(); ++r)
      for (int64_t k = 0; k < C; ++k)
        ASSERT_EQ(q.f32()[r * C + k], w.at("layers.1.qkv.weight")->value.f32()[rows[r] * C + k]) << rank << " " << r;
    const Parameter& bias = *s.at("layers.1.qkv.bias");
    for (size_t r = 0; r < rows.size(); ++r) EXPECT_EQ(bias.shard.global_index(static_cast<int64_t>(r)), rows[r]);
    const Tensor& gu = s.at("layers.0.gate_up.weight")->value;
    ASSERT_EQ(gu.shape(), Shape({F, C}));
    for (int64_t r = 0; r < F; ++r) {
      const int64_t g = r < F / 2 ? rank * F / 2 + r : F + rank * F / 2 + (r - F / 2);
      for (int64_t k = 0; k < C; ++k)
        ASSERT_EQ(gu.f32()[r * C + k], w.at("layers.0.gate_up.weight")->value.f32()[g * C + k]) << rank << " " << r;
    }
    EXPECT_EQ(s.at("layers.0.o.weight")->shape, Shape({C, 2 * D}));
    EXPECT_EQ(s.at("layers.0.down.weight")->shape, Shape({C, F / 2}));
    EXPECT_EQ(s.at("embed.weight")->shape, Shape({7, C}));
    EXPECT_EQ(s.at("head.weight")->shape, Shape({7, C}));
  }
}

TEST(Llama, EqualFusedSizesShardAsFusedCount) {
  const TpSlot tp{1, 2, nullptr};
  Linear a("a", 8, {12, 12, 12}, true, Split::Column, tp);
  Linear b("b", 8, 36, true, Split::Column, tp, 3);
  for (int i = 0; i < 2; ++i) {
    const Shard& x = a.parameters()[i]->shard;
    const Shard& y = b.parameters()[i]->shard;
    EXPECT_TRUE(x.outer == y.outer && x.split == y.split && x.inner == y.inner && x.part == y.part &&
                x.parts == y.parts && x.blocks.empty() && y.blocks.empty());
  }
}

TEST(GradCheck, LlamaGroupedQuery) {
  device::CpuDevice dev;
  LlamaConfig c = small(4, 2);
  Model m = build_llama(c);
  m.materialize(dev, 3);
  // Larger weights than the 0.02 init so every path (attention, norms, SwiGLU) contributes visibly.
  for (Parameter* p : m.parameters())
    if (p->init == Init::Normal) testing::fill_normal(p->value, tandem::hash_name(p->name), 0.3f);
  Tensor x = random_tokens(dev, {2, 5}, 13, 7);
  Tensor y = random_tokens(dev, {10}, 13, 8);
  check_directional_derivatives(m, x, y, kStep);
}

// The head tied to the embedding: one parameter fewer (V x C), the head reads the table's memory, and the table's
// gradient is the sum of the untied model's two gradients (table and head) at the same weights.
TEST(Llama, TiedEmbeddingsShareValueAndSumGradients) {
  device::CpuDevice dev;
  const LlamaConfig untied_config = small();
  LlamaConfig tied_config = untied_config;
  tied_config.tie_word_embeddings = true;
  EXPECT_EQ(llama_parameter_count(tied_config), llama_parameter_count(untied_config) - 13 * 16);
  Model untied = build_llama(untied_config), tied = build_llama(tied_config);
  ASSERT_EQ(tied.replicas().size(), 1u);
  EXPECT_EQ(tied.replicas()[0]->name, "embed.weight");
  untied.materialize(dev, 3);
  tied.materialize(dev, 3);
  auto u = by_name(untied), t = by_name(tied);
  EXPECT_EQ(t.size() + 1, u.size());
  EXPECT_FALSE(t.count("head.weight"));
  EXPECT_EQ(tied.replicas()[0]->value.raw(), t.at("embed.weight")->value.raw());
  for (auto& [name, p] : t) {
    testing::fill_normal(p->value, tandem::hash_name(name), 0.3f);
    std::memcpy(u.at(name)->value.raw(), p->value.raw(), p->value.nbytes());
  }
  std::memcpy(u.at("head.weight")->value.raw(), t.at("embed.weight")->value.raw(),
              t.at("embed.weight")->value.nbytes());
  Tensor x = random_tokens(dev, {2, 5}, 13, 7);
  Tensor y = random_tokens(dev, {10}, 13, 8);
  untied.zero_grad();
  tied.zero_grad();
  EXPECT_EQ(loss_of(untied, x, y, true), loss_of(tied, x, y, true));
  for (auto& [name, p] : t) {
    for (int64_t i = 0; i < p->grad.numel(); ++i) {
      float want = u.at(name)->grad.f32()[i];
      if (name == "embed.weight") want += u.at("head.weight")->grad.f32()[i];
      ASSERT_NEAR(p->grad.f32()[i], want, 1e-6f * (1 + std::fabs(want))) << name << " element " << i;
    }
  }
  // Under tp the replica is split as the table is (vocabulary rows).
  tied_config.vocab_size = 14;
  const Model slot = build_llama(tied_config, TpSlot{1, 2, nullptr});
  EXPECT_EQ(slot.replicas().at(0)->shape, Shape({7, 16}));
}

TEST(GradCheck, LlamaTied) {
  device::CpuDevice dev;
  LlamaConfig c = small(4, 2);
  c.tie_word_embeddings = true;
  Model m = build_llama(c);
  m.materialize(dev, 5);
  for (Parameter* p : m.parameters())
    if (p->init == Init::Normal) testing::fill_normal(p->value, tandem::hash_name(p->name), 0.3f);
  Tensor x = random_tokens(dev, {2, 5}, 13, 17);
  Tensor y = random_tokens(dev, {10}, 13, 18);
  check_directional_derivatives(m, x, y, kStep);
}

TEST(GradCheck, LlamaMultiHeadBiasedScaledRope) {
  device::CpuDevice dev;
  LlamaConfig c = small(4, 4);
  c.attention_bias = true;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = spec::RopeType::Llama3;
  c.rope_scaling.factor = 32.0;
  c.rope_scaling.original_max_position_embeddings = 4;
  Model m = build_llama(c);
  m.materialize(dev, 4);
  // Biases and gains away from their zero and one inits, so their gradients are checked at a general point.
  for (Parameter* p : m.parameters())
    testing::fill_normal(p->value, tandem::hash_name(p->name), p->init == Init::Normal ? 0.3f : 0.5f);
  Tensor x = random_tokens(dev, {2, 6}, 13, 9);
  Tensor y = random_tokens(dev, {12}, 13, 10);
  check_directional_derivatives(m, x, y, kStep);
}

// Qwen3's q_norm and k_norm, their gains away from one, on heads wider than C / H.
TEST(GradCheck, Qwen3HeadNorms) {
  device::CpuDevice dev;
  LlamaConfig c = small(4, 2);
  c.family = spec::LlamaFamily::Qwen3;
  c.head_dim = 6;
  Model m = build_llama(c);
  m.materialize(dev, 6);
  const auto params = by_name(m);
  for (const char* n : {"layers.1.q_norm.weight", "layers.1.k_norm.weight"}) {
    ASSERT_TRUE(params.count(n)) << n;
    EXPECT_EQ(params.at(n)->shape, Shape({6}));
    EXPECT_FALSE(params.at(n)->decay);
  }
  for (Parameter* p : m.parameters())
    testing::fill_normal(p->value, tandem::hash_name(p->name), p->init == Init::Normal ? 0.3f : 0.5f);
  Tensor x = random_tokens(dev, {2, 5}, 13, 19);
  Tensor y = random_tokens(dev, {10}, 13, 20);
  check_directional_derivatives(m, x, y, kStep);
}

TEST(ActivationCheckpointing, LlamaSameGradients) {
  device::CpuDevice dev;
  LlamaConfig c = small(4, 2);
  c.num_hidden_layers = 3;
  c.seq_len = 16;
  Model m = build_llama(c);
  m.materialize(dev, 9);
  Tensor x = random_tokens(dev, {2, 16}, 13, 1);
  Tensor y = random_tokens(dev, {32}, 13, 2);
  loss_of(m, x, y, false);  // places the rotary tables, which stay for the model's life
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

TEST(Llama, RefusesShapesItCannotSplitOrGroup) {
  EXPECT_NE(testing::error_of([] { build_llama(small(4, 3)); }).find("num_key_value_heads 3"), std::string::npos);
  const std::string tp = testing::error_of([] { build_llama(small(4, 2), TpSlot{0, 4, nullptr}); });
  EXPECT_NE(tp.find("num_key_value_heads 2"), std::string::npos) << tp;
  EXPECT_NE(tp.find("4 slots"), std::string::npos) << tp;
  LlamaConfig longer = small();
  longer.max_position_embeddings = 4;
  EXPECT_NE(testing::error_of([&] { build_llama(longer); }).find("max_position_embeddings 4"), std::string::npos);
  LlamaConfig odd = small();
  odd.head_dim = 5;
  EXPECT_NE(testing::error_of([&] { build_llama(odd); }).find("even"), std::string::npos);
}

}  // namespace
}  // namespace tandem::nn
