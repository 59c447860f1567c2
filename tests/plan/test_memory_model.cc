// The memory model against the allocator, in one process: every rank of every layout of the grid is trained
// for a step on stand-in communicators (comm/stand_in.h), and its measured peak (AccountedDevice) must equal the
// prediction, which runs the same engine on a counting device. Prints the predicted-vs-measured table. Also the
// structure the model reports: live micro-batches within the schedule's bound, the purposes that must (not)
// appear under each ZeRO stage, and a model of custom layers planned like any other.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>

#include "plan/plan_test_util.h"
#include "tandem/data/dataset.h"
#include "tandem/layout/groups.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/linear.h"
#include "tandem/ops/ops.h"
#include "tandem/plan/preflight.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

using config::Json;
using testing::mem_case;
using testing::MemCase;
using testing::run_case;

uint64_t measure(const MemCase& c, int rank) {
  uint64_t peak = 0;
  run_case(c, rank, [&](train::Trainer& t) { peak = t.device().peak_bytes(); });
  return peak;
}

std::vector<MemCase> grid() {
  std::vector<MemCase> out;
  for (const char* model : {"gpt", "mlp"}) {
    auto add = [&](MemCase c) {
      c.model = model;
      c.steps = 1;  // one process plays every rank in turn: keep each run short
      for (bool ckpt : {false, true}) {
        c.ckpt = ckpt;
        out.push_back(c);
      }
    };
    add(mem_case(1, 1, 1));                                         // one device
    add(mem_case(1, 1, 1, 0, spec::ScheduleKind::OneFOneB, 1, 1));  // 8 micro-batches of 1
    for (int zero = 0; zero <= 3; ++zero) add(mem_case(2, 1, 1, zero));
    add(mem_case(4, 1, 1, 3, spec::ScheduleKind::OneFOneB, 1, 1));  // shards padded: the last rank owns fewer elements
    add(mem_case(1, 1, 2));
    for (auto s : {spec::ScheduleKind::GPipe, spec::ScheduleKind::OneFOneB}) add(mem_case(1, 2, 1, 0, s));
    add(mem_case(1, 2, 1, 0, spec::ScheduleKind::Interleaved, 2));
    add(mem_case(1, 4, 1, 0, spec::ScheduleKind::OneFOneB, 1, 1));
    add(mem_case(1, 1, 1, 0, spec::ScheduleKind::Interleaved, 2));  // two chunks on one rank: handed over, not sent
    for (int zero : {1, 3}) add(mem_case(2, 2, 1, zero));
    add(mem_case(2, 2, 1, 2, spec::ScheduleKind::Interleaved, 2, 1));
    add(mem_case(1, 2, 2, 0, spec::ScheduleKind::GPipe));
    add(mem_case(2, 1, 2, 3));
    // bf16 compute: bf16 values and activations, a separate fp32 master, fp32 scratch in the CPU matmuls.
    for (int zero = 0; zero <= 3; ++zero) add(mem_case(2, 1, 1, zero, spec::ScheduleKind::OneFOneB, 1, 2, true));
    add(mem_case(1, 2, 2, 0, spec::ScheduleKind::OneFOneB, 1, 2, true));
    add(mem_case(1, 2, 1, 0, spec::ScheduleKind::Interleaved, 2, 2, true));
  }
  // LoRA: frozen units beside the adapters' under every ZeRO stage, split over tp and pipeline stages, in bf16 too.
  for (MemCase c : {mem_case(1, 1, 1), mem_case(2, 1, 1, 1), mem_case(2, 1, 1, 3), mem_case(1, 2, 2),
                    mem_case(2, 1, 1, 2, spec::ScheduleKind::OneFOneB, 1, 2, true),
                    mem_case(1, 2, 1, 0, spec::ScheduleKind::OneFOneB, 1, 2, true)}) {
    c.model = "llama_lora";
    c.steps = 1;
    out.push_back(c);
  }
  // FP8: each projection's FP8 copies, scales and the CPU product's fp32 scratch, under ZeRO-3 and tp, in bf16 too.
  for (MemCase c : {mem_case(1, 1, 1), mem_case(2, 1, 1, 3), mem_case(2, 1, 2, 1),
                    mem_case(1, 2, 2, 0, spec::ScheduleKind::OneFOneB, 1, 2, true)}) {
    c.model = "llama_fp8";
    c.steps = 1;
    out.push_back(c);
  }
  // The other recipes' scales of each row and tile, and the amaxes they take again in backward (blockwise: one
  // slot per tensor, its 64 features not whole tiles over tp).
  for (MemCase c :
       {mem_case(1, 1, 1), mem_case(2, 1, 2, 3), mem_case(1, 2, 1, 0, spec::ScheduleKind::OneFOneB, 1, 2, true)}) {
    c.model = "llama_fp8_rowwise";
    c.steps = 1;
    out.push_back(c);
  }
  for (MemCase c :
       {mem_case(1, 1, 1), mem_case(2, 1, 1, 3), mem_case(1, 2, 1, 0, spec::ScheduleKind::OneFOneB, 1, 2, true)}) {
    c.model = "llama_fp8_blockwise";
    c.steps = 1;
    out.push_back(c);
  }
  // Qwen3: the projection's output kept beside the normalised q and k, the norms' rstd, the gains' gradients summed
  // over tp; with recomputation and in bf16 too.
  for (MemCase c :
       {mem_case(1, 1, 1), mem_case(1, 2, 2), mem_case(2, 1, 2, 3, spec::ScheduleKind::OneFOneB, 1, 2, true)}) {
    c.model = "llama_qwen3";
    c.steps = 1;
    for (bool ckpt : {false, true}) {
      c.ckpt = ckpt;
      out.push_back(c);
    }
  }
  // Qwen3-MoE: the experts' routed rows and their products, the balance sums each micro-batch carries; one device,
  // tp2 x dp2 at ZeRO-3, with recomputation and in bf16.
  for (MemCase c : {mem_case(1, 1, 1), mem_case(2, 1, 2, 3, spec::ScheduleKind::OneFOneB, 1, 2, true)}) {
    c.model = "llama_qwen3_moe";
    c.steps = 1;
    for (bool ckpt : {false, true}) {
      c.ckpt = ckpt;
      out.push_back(c);
    }
  }
  // Qwen2-MoE: the shared expert's gate, SwiGLU and gated output beside the experts; one device and tp2 x dp2 at ZeRO-3
  // in bf16 with recomputation.
  for (MemCase c : {mem_case(1, 1, 1), mem_case(2, 1, 2, 3, spec::ScheduleKind::OneFOneB, 1, 2, true)}) {
    c.model = "llama_qwen2_moe";
    c.steps = 1;
    c.ckpt = c.dp > 1;
    out.push_back(c);
  }
  // Expert parallelism: each rank keeps its slot's experts (their units sharded over the slot's replicas) and computes
  // the rows it receives; every token routed to every expert, so they are the balanced prediction's. dp4 with the
  // experts over 2 at ZeRO-3 and over 4 at ZeRO-1 with recomputation; tp2 x dp2 over 2 in bf16.
  for (MemCase c :
       {mem_case(4, 1, 1, 3), mem_case(4, 1, 1, 1), mem_case(2, 1, 2, 2, spec::ScheduleKind::OneFOneB, 1, 2, true)}) {
    c.model = "llama_qwen3_moe_every";
    c.steps = 1;
    c.ep = c.zero == 1 ? 4 : 2;
    c.ckpt = c.zero == 1;
    out.push_back(c);
  }
  // LoRA on the experts (an adapter per expert, PEFT's target_parameters): the adapters' grouped products and their
  // state beside the frozen experts; one device with and without recomputation, tp2 x dp2 at ZeRO-3 in bf16, and the
  // experts with their adapters over 2 of 4 replicas at ZeRO-3.
  for (MemCase c : {mem_case(1, 1, 1), mem_case(2, 1, 2, 3, spec::ScheduleKind::OneFOneB, 1, 2, true)}) {
    c.model = "llama_qwen3_moe_lora";
    c.steps = 1;
    for (bool ckpt : {false, true}) {
      c.ckpt = ckpt;
      if (!ckpt || c.dp == 1) out.push_back(c);
    }
  }
  {
    MemCase c = mem_case(4, 1, 1, 3);
    c.model = "llama_qwen3_moe_every_lora";
    c.steps = 1;
    c.ep = 2;
    out.push_back(c);
  }
  // OLMoE under tp: each slot's gains, the tokens' sums of squares and their sums over the slots; with recomputation.
  for (bool ckpt : {false, true}) {
    MemCase c = mem_case(1, 1, 2);
    c.model = "llama_olmoe_every";
    c.steps = 1;
    c.ckpt = ckpt;
    out.push_back(c);
  }
  // Documents (data.document_mask): every stage fetches each micro-batch's.
  for (MemCase c : {mem_case(1, 2, 1, 0, spec::ScheduleKind::OneFOneB, 1, 1), mem_case(2, 1, 1, 3)}) {
    c.model = "llama_docs";
    c.steps = 1;
    out.push_back(c);
  }
  return out;
}

// One case of the grid a test, so that the suite spreads them over the cores.
class MemoryModelGrid : public ::testing::TestWithParam<MemCase> {};

TEST_P(MemoryModelGrid, PredictsEveryRanksMeasuredPeakExactly) {
  const MemCase& c = GetParam();
  const plan::MemoryPrediction p = plan::MemoryModel(testing::planned(c.model)).predict(testing::case_setup(c), true);
  testing::MemRow row{c.name()};
  for (int rank = 0; rank < c.dp * c.pp * c.tp; ++rank) {
    const int64_t measured = static_cast<int64_t>(measure(c, rank));
    const int64_t predicted = p.of_rank(rank).peak;
    const double err = std::fabs(static_cast<double>(predicted - measured)) / static_cast<double>(measured);
    EXPECT_EQ(predicted, measured) << c.name() << " rank " << rank;
    row.worst_error = std::max(row.worst_error, err);
    if (measured > row.measured) {
      row.measured = measured;
      row.predicted = predicted;
    }
  }
  std::printf("[memory model, one process, stand-in communicators]\n%s", testing::format_rows({row}).c_str());
}

INSTANTIATE_TEST_SUITE_P(Grid, MemoryModelGrid, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<MemCase>& info) { return info.param.test_name(); });

std::vector<MemCase> offload_cases() {
  std::vector<MemCase> cases;
  for (const char* offload : {"cpu", "param", "nvme", "param-nvme"})
    for (MemCase c : {mem_case(1, 1, 1), mem_case(2, 1, 1, 2), mem_case(2, 2, 1, 1), mem_case(1, 1, 2, 3),
                      mem_case(2, 1, 1, 3, spec::ScheduleKind::OneFOneB, 1, 1, true)}) {
      c.model = "gpt";
      c.steps = 1;
      c.offload = offload;
      cases.push_back(c);
    }
  return cases;
}

// Offload: the device's peak and the host memory the offloaded state takes, both predicted to the byte, on every
// rank; the device holds less than without offload. One case a test.
class OffloadCase : public ::testing::TestWithParam<MemCase> {};

TEST_P(OffloadCase, PredictsTheDeviceAndTheHostExactly) {
  const MemCase& c = GetParam();
  const plan::MemoryPrediction p =
      plan::MemoryModel(plan::planned_model(testing::typed_model(c.model))).predict(testing::case_setup(c), true);
  MemCase device_only = c;
  device_only.offload.clear();
  const plan::MemoryPrediction without =
      plan::MemoryModel(plan::planned_model(testing::typed_model(c.model))).predict(testing::case_setup(device_only));
  EXPECT_LT(p.peak(), without.peak()) << c.name();
  testing::MemRow row{c.name()};
  for (int rank = 0; rank < c.dp * c.pp * c.tp; ++rank) {
    run_case(c, rank, [&](train::Trainer& trainer) {
      const auto measured = static_cast<int64_t>(trainer.device().peak_bytes());
      ASSERT_NE(trainer.engine().host_memory(), nullptr) << c.name();
      const auto host = static_cast<int64_t>(trainer.engine().host_memory()->peak_bytes());
      EXPECT_EQ(p.of_rank(rank).peak, measured) << c.name() << " rank " << rank << ": device";
      EXPECT_EQ(p.of_rank(rank).host_peak, host) << c.name() << " rank " << rank << ": host";
      EXPECT_GT(host, 0) << c.name();
      EXPECT_EQ(p.of_rank(rank).disk_bytes, static_cast<int64_t>(trainer.engine().store().swap_bytes()))
          << c.name() << " rank " << rank << ": disk";
      EXPECT_EQ(p.of_rank(rank).disk_bytes > 0, c.offload.find("nvme") != std::string::npos) << c.name();
      if (measured > row.measured) {
        row.measured = measured;
        row.predicted = p.of_rank(rank).peak;
      }
    });
  }
  std::printf("[memory model with offload: the device's peak]\n%s", testing::format_rows({row}).c_str());
}

INSTANTIATE_TEST_SUITE_P(Offload, OffloadCase, ::testing::ValuesIn(offload_cases()),
                         [](const ::testing::TestParamInfo<MemCase>& info) { return info.param.test_name(); });

// With one replica and several micro-batches an offloaded unit keeps one fp32 gradient on the host: the step's
// running sum, whose last copy down is the reduced gradient the host AdamW reads (not a second buffer beside it).
TEST(MemoryModel, OffloadKeepsOneGradientOnTheHost) {
  MemCase c = mem_case(1, 1, 1);
  c.model = "gpt";
  c.steps = 1;
  c.offload = "cpu";
  ASSERT_GT(c.global / c.micro, 1) << "the case needs several micro-batches";
  run_case(c, 0, [&](train::Trainer& trainer) {
    int64_t params = 0;
    for (const nn::Parameter* p : trainer.engine().model().parameters()) params += shape_numel(p->shape);
    ASSERT_NE(trainer.engine().host_memory(), nullptr);
    EXPECT_EQ(trainer.engine().host_memory()->live()[MemoryPurpose::Gradients], 4 * params);
  });
}

// The planner's run makes no swap file (OffloadRun::swap_files, its choice): it plans their sizes for a folder that
// does not even exist, where a training run's store refuses to start.
TEST(MemoryModel, PlansTheSwapFilesWithoutMakingThem) {
  MemCase c = mem_case(2, 1, 1, 3);
  c.model = "gpt";
  c.steps = 1;
  c.offload = "param-nvme";
  plan::Setup s = testing::case_setup(c);
  const std::string nowhere = "/nonexistent/tandem-swap";
  s.offload_optimizer.nvme_path = s.offload_param.nvme_path = nowhere;
  const plan::MemoryPrediction p =
      plan::MemoryModel(plan::planned_model(testing::typed_model(c.model))).predict(s, true);
  EXPECT_GT(p.of_rank(0).disk_optimizer, 0);
  EXPECT_GT(p.of_rank(0).disk_parameters, 0);
  EXPECT_FALSE(std::filesystem::exists(nowhere));
}

// offload_optimizer.ratio 0.5: the last layers' optimizer goes to the host, at least half of the parameters, and the
// first layers (the embedding: its gradient comes last in the backward) stay on the device.
TEST(MemoryModel, OffloadRatioKeepsTheFirstLayersOnTheDevice) {
  MemCase c = mem_case(1, 1, 1);
  c.model = "gpt";
  c.steps = 1;
  c.offload = "cpu-half";
  run_case(c, 0, [&](train::Trainer& trainer) {
    std::vector<int64_t> layer_params;
    int64_t params = 0;
    for (const auto& layer : trainer.engine().model().layers()) {
      int64_t n = 0;
      for (const nn::Parameter* p : layer->parameters()) n += shape_numel(p->shape);
      layer_params.push_back(n);
      params += n;
    }
    ASSERT_NE(trainer.engine().host_memory(), nullptr);
    const int64_t offloaded = trainer.engine().host_memory()->live()[MemoryPurpose::Gradients] / 4;
    int64_t suffix = 0;  // the parameters of the layers from `first` on
    size_t first = layer_params.size();
    while (first > 0 && suffix < offloaded) suffix += layer_params[--first];
    ASSERT_LT(first, layer_params.size()) << "something is offloaded";
    EXPECT_EQ(suffix, offloaded) << "the offloaded units are the last layers";
    EXPECT_GT(first, 0u) << "the first layer stays on the device";
    EXPECT_GE(2 * offloaded, params) << "at least the ratio's share is offloaded";
    EXPECT_LT(2 * (offloaded - layer_params[first]), params) << "and no more layers than that takes";
  });
}

// offload_optimizer alone in bf16: the device keeps the bf16 values, so the host keeps no copy of them; the update
// casts each unit's values into one of two upload buffers of the largest unit's size. Against the same run in fp32,
// whose host values are the master itself: those two buffers more, not 2 bytes a parameter.
TEST(MemoryModel, OffloadKeepsNoCopyOfTheValuesOnTheHost) {
  int64_t params = 0, largest_unit = 0;
  std::map<bool, int64_t> held;  // by bf16: the host's parameter bytes
  for (bool bf16 : {false, true}) {
    MemCase c = mem_case(1, 1, 1);
    c.model = "gpt";
    c.bf16 = bf16;
    c.offload = "cpu";
    run_case(c, 0, [&](train::Trainer& trainer) {
      params = largest_unit = 0;
      for (const auto& layer : trainer.engine().model().layers()) {
        int64_t n = 0;
        for (const nn::Parameter* p : layer->parameters()) n += shape_numel(p->shape);
        params += n;
        largest_unit = std::max(largest_unit, n);
      }
      ASSERT_NE(trainer.engine().host_memory(), nullptr);
      held[bf16] = trainer.engine().host_memory()->live()[MemoryPurpose::Parameters];
    });
  }
  EXPECT_EQ(held[true] - held[false], 2 * largest_unit * 2)
      << "two bf16 upload buffers of the largest unit, of " << params << " parameters";
  EXPECT_GT(held[false], 0);
}

TEST(MemoryModel, LiveMicroBatchesStayWithinTheScheduleBound) {
  for (const MemCase& c : grid()) {
    const plan::MemoryPrediction p = plan::MemoryModel(testing::planned(c.model)).predict(testing::case_setup(c));
    for (const plan::RankMemory& r : p.ranks) {
      EXPECT_GE(r.live_micro_batches, 1) << c.name();
      EXPECT_LE(r.live_micro_batches, r.activation_bound) << c.name() << " stage " << r.pp_rank;
    }
  }
}

TEST(MemoryModel, ZeroStagesHoldWhatParameterStoreHolds) {
  // mlp 256-512-...-64 over dp 2: every held term follows ParameterStore's buffers exactly.
  MemCase c = mem_case(2, 1, 1);
  c.model = "mlp";
  std::map<int, plan::RankMemory> by_stage;
  for (int zero = 0; zero <= 3; ++zero) {
    c.zero = zero;
    by_stage[zero] =
        plan::MemoryModel(plan::planned_model(testing::typed_model("mlp"))).predict(testing::case_setup(c)).worst();
  }
  const int64_t P = plan::MemoryModel(plan::planned_model(testing::typed_model("mlp"))).logical_parameters();
  // Every layer's element count is even, so dp 2 pads nothing: stage 0 holds 4 P values + 4 P grads + 8 P moments.
  EXPECT_EQ(by_stage[0].resident[MemoryPurpose::Parameters], 4 * P);
  EXPECT_EQ(by_stage[0].resident[MemoryPurpose::Gradients], 4 * P);
  EXPECT_EQ(by_stage[0].resident[MemoryPurpose::Optimizer], 8 * P);
  EXPECT_EQ(by_stage[1].resident[MemoryPurpose::Gradients], 4 * P + 2 * P);  // full + owned shard
  EXPECT_EQ(by_stage[1].resident[MemoryPurpose::Optimizer], 4 * P);
  EXPECT_EQ(by_stage[2].resident[MemoryPurpose::Gradients], 2 * P);
  EXPECT_EQ(by_stage[3].resident[MemoryPurpose::Parameters], 2 * P);
  EXPECT_EQ(by_stage[0].at_peak[MemoryPurpose::ZeroBuffers], 0);
  EXPECT_GT(by_stage[3].at_peak[MemoryPurpose::ZeroBuffers], 0);  // a gathered layer (and its gradient)
}

// Under LoRA the base is frozen: its values are held in the compute dtype alone, with no gradient, no fp32 master and
// no optimizer state; the adapters carry the usual fp32 training state.
TEST(MemoryModel, LoraHoldsTheFrozenBaseInTheComputeDtypeOnly) {
  const nn::Model whole = train::build_model(testing::typed_model("llama_lora"), {}, testing::typed_lora("llama_lora"));
  int64_t base = 0, adapters = 0;
  for (const nn::Parameter* p : whole.parameters()) (p->adapter ? adapters : base) += shape_numel(p->shape);
  ASSERT_GT(adapters, 0);
  for (const bool bf16 : {false, true}) {
    MemCase c = mem_case(1, 1, 1, 0, spec::ScheduleKind::OneFOneB, 1, 2, bf16);
    c.model = "llama_lora";
    const plan::RankMemory r = plan::MemoryModel(testing::planned(c.model)).predict(testing::case_setup(c)).worst();
    const int64_t x = bf16 ? 2 : 4;  // the compute dtype's bytes
    // Values in the compute dtype for every parameter, an fp32 master only for the adapters in bf16.
    EXPECT_EQ(r.resident[MemoryPurpose::Parameters], x * (base + adapters) + (bf16 ? 4 * adapters : 0)) << bf16;
    EXPECT_EQ(r.resident[MemoryPurpose::Gradients], 4 * adapters) << bf16;
    EXPECT_EQ(r.resident[MemoryPurpose::Optimizer], 8 * adapters) << bf16;
  }
}

// A layer the planner has never heard of: y = x + b over the last dim, with a scratch buffer of its own in forward
// and a copy of dy kept through its backward. The planner knows nothing of it but what running it shows.
class Shift final : public nn::Layer {
 public:
  Shift(const std::string& name, int64_t width) : Layer(name) {
    b_ = &add_parameter("bias", {width}, nn::Init::Zeros, false);
  }
  Tensor forward(const Tensor& x, nn::Saved& saved) override {
    const Tensor scratch = Tensor::empty({x.numel() * 3}, x.dtype(), x.device(), "shift scratch");  // freed at return
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), "shift output");
    y.copy_from(x);
    ops::add_bias(y, b_->value);
    saved.tensors = {Tensor::empty({1}, DType::F32, x.device(), "shift marker")};
    return y;
  }
  Tensor backward(const Tensor& dy, nn::Saved& saved) override {
    ops::bias_backward(dy, b_->grad);
    Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device(), "shift input gradient");
    dx.copy_from(dy);
    saved.clear();
    return dx;
  }

 private:
  nn::Parameter* b_;
};

nn::Model custom_model(nn::TpSlot) {
  nn::Model m;
  m.emplace<nn::Linear>("fc1", 16, 64);
  m.emplace<Shift>("shift1", 64);
  m.emplace<nn::Activation>("act", nn::ActivationKind::Gelu);
  m.emplace<Shift>("shift2", 64);
  m.emplace<nn::Linear>("fc2", 64, 8);
  return m;
}

// A model of custom layers, through the C++ API, on a 2-stage pipeline of 2 replicas with ZeRO-2: every rank's
// predicted peak equals the one its training run measures.
// The CUDA plan away from the GPU (cuDNN's attention workspace estimated, not asked) against the peaks the runs of
// bench/gpu_planner_peaks.sh measured on an H200 on 2026-12-04 (docs/benchmarks.md), the loss computed in the head in
// chunks: the gpt 1.64B, micro 8 x 2 of 1024 tokens, and the Llama 3.2 1B and 3B shapes, micro 4 x 4 and 2 x 8 of
// 2048 tokens; bf16, AdamW, one device. (With the whole logits held, on 2026-12-01, they were 0.3-2.2 GB higher.)
TEST(MemoryModel, PlansTheGpuPeaksMeasuredOnAnH200) {
  const Json llama3 = {{"rope_type", "llama3"},
                       {"factor", 32},
                       {"low_freq_factor", 1},
                       {"high_freq_factor", 4},
                       {"original_max_position_embeddings", 8192}};
  auto llama = [&](int64_t hidden, int64_t layers, int heads) {
    return Json{{"type", "llama"},
                {"vocab_size", 128256},
                {"seq_len", 2048},
                {"hidden_size", hidden},
                {"num_hidden_layers", layers},
                {"num_attention_heads", heads},
                {"num_key_value_heads", 8},
                {"intermediate_size", 8192},
                {"max_position_embeddings", 131072},
                {"rms_norm_eps", 1e-5},
                {"rope_theta", 500000},
                {"rope_scaling", llama3},
                {"tie_word_embeddings", true}};
  };
  struct Measured {
    const char* name;
    Json model;
    int64_t micro, measured_peak;
  };
  auto gpt = [](int64_t dim, int64_t layers, int heads) {
    return Json{{"type", "gpt"}, {"vocab_size", 50304}, {"seq_len", 1024},
                {"dim", dim},    {"layers", layers},    {"heads", heads}};
  };
  const std::vector<Measured> runs = {{"gpt 1.64B", gpt(1600, 48, 25), 8, 50331639060},
                                      {"gpt 1.64B micro 16", gpt(1600, 48, 25), 16, 70588685588},
                                      {"gpt d2048 L24", gpt(2048, 24, 16), 8, 39095097364},
                                      {"gpt d2048 L24 micro 16", gpt(2048, 24, 16), 16, 52096522260},
                                      {"gpt 6.86B", gpt(4096, 32, 32), 4, 141233184788},
                                      {"Llama 3.2 1B", llama(2048, 16, 32), 4, 33320284436},
                                      {"Llama 3.2 3B", llama(3072, 28, 24), 2, 68835823636}};
  for (const Measured& r : runs) {
    const config::TrainConfig cfg = config::parse(
        config::validate({{"model", r.model}, {"train_batch_size", 16}, {"train_micro_batch_size_per_gpu", r.micro}}));
    plan::Setup s;
    s.plan = layout::resolve_parallel(config::parallel_config(Json()), 1);
    s.micro_batch = r.micro;
    s.micro_batches = 16 / r.micro;
    s.dtype_bytes = 2;
    s.backend = plan::Backend::Cuda;
    const int64_t predicted = plan::MemoryModel(plan::planned_model(cfg.model)).predict(s).peak();
    EXPECT_EQ(predicted, r.measured_peak) << r.name;
  }
}

TEST(MemoryModel, PlansAModelOfCustomLayers) {
  plan::PlannedModel pm;
  pm.build = custom_model;
  pm.sample_shape = {16};
  pm.input_dtype = DType::F32;
  plan::Setup s;
  s.plan.layout = {2, 2, 1};
  s.zero_stage = 2;
  s.micro_batch = 2;
  s.micro_batches = 4;
  const plan::MemoryPrediction p = plan::MemoryModel(pm).predict(s, true);
  const Json cfg = {{"train_batch_size", 16},
                    {"train_micro_batch_size_per_gpu", 2},
                    {"steps", 1},
                    {"zero_optimization", {{"stage", 2}}},
                    {"parallel", {{"virtual_gpus", 2}, {"pipeline", 2}}},
                    {"model", {{"type", "mlp"}, {"sizes", {16, 64, 64, 8}}}},  // shapes the data; the model is custom
                    {"data", {{"type", "synthetic"}}}};
  const config::TrainConfig tc = config::parse(config::validate(cfg), 2);
  for (int rank = 0; rank < 4; ++rank) {
    layout::Groups groups = layout::make_stand_in_groups(s.plan.layout, rank);
    spec::ModelIO io;
    io.features = 16;
    io.classes = 8;
    train::TrainOptions opt;
    opt.print = false;
    train::Trainer trainer(tc, layout::resolve_parallel(tc.parallel, 4), custom_model,
                           data::make_dataset(tc.data, io, tc.seed), opt, &groups);
    trainer.run();
    EXPECT_EQ(p.of_rank(rank).peak, static_cast<int64_t>(trainer.device().peak_bytes())) << "rank " << rank;
  }
  EXPECT_GT(p.peak(), 0);
}

TEST(Preflight, SaysThePeakAndWhatFitsWhenOverBudget) {
  MemCase c = mem_case(1, 1, 1);
  c.model = "gpt";
  Json json = testing::case_config(c);
  const config::TrainConfig free_cfg = config::parse(config::validate(json), 1);
  const layout::ParallelPlan plan = layout::resolve_parallel(config::parallel_config(json.at("parallel")), 1);
  const plan::PreflightResult ok = plan::preflight(free_cfg, plan);
  EXPECT_TRUE(ok.fits);
  EXPECT_NE(ok.line.find("predicted peak per device"), std::string::npos);
  EXPECT_EQ(ok.per_rank.size(), 1u);
  // A budget just under the prediction: over, with the breakdown and a suggestion (checkpointing fits on one
  // device).
  json["device_memory"] = ok.peak - 1024;
  const config::TrainConfig tight = config::parse(config::validate(json), 1);
  const plan::PreflightResult over = plan::preflight(tight, plan);
  EXPECT_FALSE(over.fits);
  EXPECT_NE(over.message.find("activations"), std::string::npos) << over.message;
  EXPECT_NE(over.message.find("fits (predicted peak"), std::string::npos) << over.message;
  std::printf("[preflight over budget] %s\n%s\n", over.line.c_str(), over.message.c_str());
}

// A mixture of experts is predicted under balanced routing, and the preflight says so; with its experts spread over
// ranks it also says that the received rows follow the routing.
TEST(Preflight, StatesTheRoutingAMixtureOfExpertsIsPredictedUnder) {
  MemCase c = mem_case(2, 1, 1, 3);
  c.model = "llama_qwen3_moe";
  Json json = testing::case_config(c);
  const config::TrainConfig tc = config::parse(config::validate(json), 2);
  const plan::PreflightResult all = plan::preflight(tc, layout::resolve_parallel(tc.parallel, 2));
  EXPECT_NE(all.line.find("mixture of experts: predicted under balanced routing (each of the 8 experts takes 1/8 of "
                          "the routed rows)"),
            std::string::npos)
      << all.line;
  EXPECT_EQ(all.line.find("actual routing"), std::string::npos) << all.line;
  json["parallel"]["expert"] = 2;
  const config::TrainConfig ep = config::parse(config::validate(json), 2);
  const plan::PreflightResult spread = plan::preflight(ep, layout::resolve_parallel(ep.parallel, 2));
  EXPECT_NE(spread.line.find("with the experts over 2 ranks, the rows a rank receives follow the actual routing"),
            std::string::npos)
      << spread.line;
  // Each rank keeps half of the experts' weights and their state: less than with every expert on each.
  EXPECT_LT(spread.peak, all.peak);
}

// Without "device_memory" the GPU's free memory is the budget; with it, the config's budget wins.
TEST(Preflight, PlansAgainstTheGpuFreeMemoryWhenTheConfigSetsNoBudget) {
  MemCase c = mem_case(1, 1, 1);
  c.model = "gpt";
  Json json = testing::case_config(c);
  const layout::ParallelPlan plan = layout::resolve_parallel(config::parallel_config(json.at("parallel")), 1);
  const config::TrainConfig no_budget = config::parse(config::validate(json), 1);
  const int64_t peak = plan::preflight(no_budget, plan).peak;
  plan::PreflightOptions gpu;
  gpu.device_free_bytes = static_cast<uint64_t>(peak - 1024);
  const plan::PreflightResult over = plan::preflight(no_budget, plan, gpu);
  EXPECT_FALSE(over.fits);
  EXPECT_NE(over.line.find("free on the GPU"), std::string::npos) << over.line;
  EXPECT_NE(over.message.find("over the GPU's free memory"), std::string::npos) << over.message;
  gpu.device_free_bytes = static_cast<uint64_t>(peak);
  EXPECT_TRUE(plan::preflight(no_budget, plan, gpu).fits);
  json["device_memory"] = 2 * peak;
  gpu.device_free_bytes = 1;
  const plan::PreflightResult configured = plan::preflight(config::parse(config::validate(json), 1), plan, gpu);
  EXPECT_TRUE(configured.fits);
  EXPECT_NE(configured.line.find("(budget "), std::string::npos) << configured.line;
  EXPECT_NE(configured.line.find("predicted step"), std::string::npos) << configured.line;
}

}  // namespace
}  // namespace tandem
