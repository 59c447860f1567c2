// OLMoE's whole q and k norms under tensor parallelism: a decoder block split over 2 slots (run on two threads, joined
// by a reducer that sums in slot order) gives the one-slot block's output, input gradient and gains' gradients, each
// slot holding the gains of its own heads. Without the sums over the slots each slot would normalise its part alone.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <exception>
#include <map>
#include <thread>
#include <vector>

#include "model_test_util.h"
#include "tandem/device/cpu_device.h"
#include "tandem/nn/llama.h"
#include "test_util.h"

namespace tandem::nn {
namespace {

// The tp group of `size` threads: each slot's f32 tensor replaced by the sum (or maximum) over the slots, taken in
// slot order.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : barrier_(size), parts_(static_cast<size_t>(size)) {}
  void reduce(int rank, const Tensor& t, bool max) {
    TANDEM_CHECK(t.dtype() == DType::F32, "the test's reducer sums f32");
    float* v = t.f32();
    parts_[static_cast<size_t>(rank)].assign(v, v + t.numel());
    barrier_.arrive_and_wait();
    for (int64_t i = 0; i < t.numel(); ++i) {
      float acc = parts_[0][static_cast<size_t>(i)];
      for (size_t r = 1; r < parts_.size(); ++r) {
        const float x = parts_[r][static_cast<size_t>(i)];
        acc = max ? std::max(acc, x) : acc + x;
      }
      v[i] = acc;
    }
    barrier_.arrive_and_wait();  // every slot has read the parts before any writes its next
  }

 private:
  std::barrier<> barrier_;
  std::vector<std::vector<float>> parts_;
};

struct SlotReducer final : TpReducer {
  SlotReducer(ThreadGroup& g, int r) : group(g), rank(r) {}
  void sum(const Tensor& t) override { group.reduce(rank, t, false); }
  void max(const Tensor& t) override { group.reduce(rank, t, true); }
  ThreadGroup& group;
  int rank;
};

// One OLMoE decoder layer: C 16, 4 query heads and 4 kv heads of D 4, 2 experts of F 8 (one chosen), V 14.
LlamaConfig olmoe() {
  LlamaConfig c = testing::small_llama();
  c.vocab_size = 14;
  c.num_hidden_layers = 1;
  c.num_key_value_heads = 4;
  c.family = spec::LlamaFamily::Olmoe;
  c.moe.num_experts = 2;
  c.moe.num_experts_per_tok = 1;
  c.moe.moe_intermediate_size = 8;
  return c;
}

std::map<std::string, Parameter*> by_name(const Model& m) {
  std::map<std::string, Parameter*> out;
  for (Parameter* p : m.parameters()) out[p->name] = p;
  return out;
}

// The gains away from one, by logical element, so that a slot holding the wrong entries shows.
void set_gains(Model& m) {
  for (const char* n : {"layers.0.q_norm.weight", "layers.0.k_norm.weight"}) {
    Parameter& p = *by_name(m).at(n);
    for (int64_t i = 0; i < p.value.numel(); ++i)
      p.value.f32()[i] = 1.0f + 0.5f * std::sin(static_cast<float>(p.shard.global_index(i)) + (n[9] == 'q' ? 0 : 7));
  }
}

Tensor randn(device::CpuDevice& dev, const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32, dev, "test input");
  testing::fill_normal(t, seed, 1.0f);
  return t;
}

struct BlockRun {
  Tensor y, dx;  // (B, T, C)
};

// The block's forward on x and backward of dy, its gradients zeroed first.
BlockRun run_block(Model& m, const Tensor& x, const Tensor& dy) {
  m.zero_grad();
  Layer& block = *m.layers().at(1);
  Saved saved;
  BlockRun r;
  r.y = block.forward(x, saved);
  r.dx = block.backward(dy, saved);
  return r;
}

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::abs(static_cast<double>(a.f32()[i]) - b.f32()[i]));
  return d;
}

TEST(LlamaTp, OlmoeWholeNormsOverSlotsEqualOneSlot) {
  device::CpuDevice dev;
  const LlamaConfig c = olmoe();
  const Shape shape{2, 6, c.hidden_size};
  const Tensor x = randn(dev, shape, 3), dy = randn(dev, shape, 4);
  Model whole = build_llama(c);
  whole.materialize(dev, 5);
  set_gains(whole);
  const BlockRun want = run_block(whole, x, dy);

  constexpr int kSlots = 2;
  ThreadGroup group(kSlots);
  std::vector<SlotReducer> reducers;
  for (int r = 0; r < kSlots; ++r) reducers.emplace_back(group, r);
  std::vector<Model> slots;
  for (int r = 0; r < kSlots; ++r) {
    slots.push_back(build_llama(c, TpSlot{r, kSlots, &reducers[static_cast<size_t>(r)]}));
    slots.back().materialize(dev, 5);
    set_gains(slots.back());
  }
  std::vector<BlockRun> got(kSlots);
  std::vector<std::exception_ptr> errors(kSlots);
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < kSlots; ++r)
      threads.emplace_back([&, r] {
        try {
          got[static_cast<size_t>(r)] = run_block(slots[static_cast<size_t>(r)], x, dy);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);

  const auto w = by_name(whole);
  for (int r = 0; r < kSlots; ++r) {
    EXPECT_LT(max_diff(got[static_cast<size_t>(r)].y, want.y), 1e-5) << "slot " << r;
    EXPECT_LT(max_diff(got[static_cast<size_t>(r)].dx, want.dx), 1e-5) << "slot " << r;
    const auto s = by_name(slots[static_cast<size_t>(r)]);
    for (const char* n : {"layers.0.q_norm.weight", "layers.0.k_norm.weight"}) {
      const Parameter& p = *s.at(n);
      ASSERT_EQ(p.shape, Shape({8})) << n;  // this slot's 2 heads of D 4
      ASSERT_EQ(p.global_shape, Shape({16})) << n;
      for (int64_t i = 0; i < p.grad.numel(); ++i) {
        const int64_t g = p.shard.global_index(i);
        EXPECT_EQ(g, r * 8 + i) << n;
        EXPECT_NEAR(p.grad.f32()[i], w.at(n)->grad.f32()[g], 1e-5) << n << " slot " << r << " entry " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::nn
