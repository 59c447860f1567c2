// Expert parallelism (parallel.expert): each mixture-of-experts layer's experts spread over ep ranks of one ZeRO group,
// the routed rows exchanged with uneven all-to-alls. First the exchange itself (the uneven all-to-all and the route's
// regrouping), then equivalence: a Qwen3-MoE (a sparse and a dense layer, the balance loss in the loss) trained with
// its experts spread, at every ZeRO stage, beside tp, pp and cp, with LoRA on a frozen base (the frozen experts sharded
// over their own replicas) and with the optimizer state (and the parameters) offloaded to host memory, must match the
// one-device run within the fp32 bounds of equivalence_bounds.h, and so must the metrics of its balance (the loss,
// the max over mean load and each layer's), under pp too, with a MoE layer on each stage, the balance loss in the loss
// under every schedule (its sums travelling from stage to stage); a run gives the same bits twice, and pipelines alone
// give one device's bits. Each rank's micro-batch is one of the one-device run's (train_batch_size 8, 4
// micro-batches of 2), so the balance loss, which is per micro-batch as in transformers, is the same. Run under mpirun
// -np 4.
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <sstream>

#include "equivalence_bounds.h"
#include "equivalence_run.h"
#include "mpi_test_main.h"
#include "tandem/device/cpu_device.h"
#include "tandem/nn/expert_route.h"
#include "test_subset.h"

namespace tandem {
namespace {

using config::Json;

// Every rank sends rank j (r + 1) * (j + 1) - 1 elements (rank 0 none to itself), each naming sender, receiver and
// place; what arrives must be each sender's slice for this rank, in rank order.
TEST(UnevenAllToAll, EverySliceArrivesInRankOrder) {
  device::CpuDevice dev;
  layout::Groups groups = layout::make_groups(testing::mpi_world(), layout::Layout{4, 1, 1});
  comm::Communicator& c = *groups.dp;
  const int r = c.rank(), n = c.size();
  const auto count = [](int from, int to) { return static_cast<int64_t>((from + 1) * (to + 1) - 1); };
  const auto value = [](int from, int to, int64_t i) { return static_cast<float>(1000 * from + 100 * to + i); };
  std::vector<int64_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    send[static_cast<size_t>(j)] = count(r, j);
    recv[static_cast<size_t>(j)] = count(j, r);
  }
  const int64_t sent = std::accumulate(send.begin(), send.end(), int64_t{0}),
                received = std::accumulate(recv.begin(), recv.end(), int64_t{0});
  Tensor in = Tensor::empty({sent}, DType::F32, dev, "in"), out = Tensor::zeros({received + 3}, DType::F32, dev, "out");
  for (int j = 0, at = 0; j < n; ++j)
    for (int64_t i = 0; i < count(r, j); ++i) in.f32()[at++] = value(r, j, i);
  c.all_to_all_v(in, send, out, recv);
  int64_t at = 0;
  for (int j = 0; j < n; ++j)
    for (int64_t i = 0; i < count(j, r); ++i, ++at)
      EXPECT_EQ(out.f32()[at], value(j, r, i)) << "rank " << r << ": element " << i << " from rank " << j;
  for (int64_t i = received; i < received + 3; ++i) EXPECT_EQ(out.f32()[i], 0.0f) << "past the received elements";
}

// Two slots of four experts: slot 1 (experts 2 and 3) receives slot 0's rows of experts 2 and 3, then its own, and
// regroups them expert by expert.
TEST(ExpertRoute, RegroupsTheSlotsRowsExpertByExpert) {
  const nn::ExpertRoute r = nn::plan_expert_route({{1, 2, 3, 0}, {4, 0, 2, 5}}, 1);
  EXPECT_EQ(r.send, (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(r.recv, (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(r.per_expert, (std::vector<int64_t>{5, 5}));
  // Arrived: slot 0's three of expert 2, then slot 1's two of expert 2 and five of expert 3.
  EXPECT_EQ(r.order, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  const nn::ExpertRoute s = nn::plan_expert_route({{1, 2, 3, 1}, {4, 1, 2, 5}}, 1);
  // Arrived: slot 0's 3 of expert 2 and 1 of expert 3, then slot 1's 2 of expert 2 and 5 of expert 3; expert 2's 5
  // rows come first.
  EXPECT_EQ(s.per_expert, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(s.order, (std::vector<int32_t>{0, 1, 2, 5, 3, 4, 6, 7, 8, 9, 10}));
  for (size_t i = 0; i < s.order.size(); ++i) EXPECT_EQ(s.inverse[static_cast<size_t>(s.order[i])], i);
  EXPECT_THROW(nn::plan_expert_route({{1, 2, 3}, {1, 2, 3}}, 0), Error);  // 3 experts over 2 slots
}

struct Case {
  // "moe" (the balance loss in the loss); "moe_sparse" (moe with both layers MoE: under pp each stage holds one, and
  // the balance sums travel from stage to stage, forward and back); "moe_deep" (moe_sparse with 4 layers: interleaved
  // over 2 ranks, each rank's chunks miss the other's later layers until the totals come back); "moe_quiet" (without
  // the loss); "moe_quiet_sparse" (moe_quiet with both layers MoE: the metrics add up the stages'); "moe_lora" (LoRA
  // on the attention of a frozen base: the experts frozen, sharded over their own replicas); "moe_shared" (Qwen2-MoE:
  // its shared expert, whole on every expert slot and split over tp); "moe_shared_lora" (Qwen2-MoE with LoRA on the
  // attention, the shared expert and its gate, with dropout: each adapter's mask keyed alike in every layout);
  // "moe_expert_lora" (LoRA on q and on the experts' stacked gate_up and down, PEFT's target_parameters: an adapter
  // per expert, split over the expert slots with its expert)
  std::string model;
  int dp, pp, tp, cp, ep, zero;
  bool checkpointing = false;
  // "": none; "offload": the optimizer state in host memory (the experts' units too); "offload_param": the parameters
  // as well
  std::string extra = "";
  // Under pp: "" (1F1B), "gpipe", or "interleaved" (2 virtual stages: the chunks go around the ranks twice)
  std::string schedule = "";
};

std::string case_name(const Case& c) {
  std::ostringstream os;
  os << c.model << "_dp" << c.dp << "_pp" << c.pp << "_tp" << c.tp << "_cp" << c.cp << "_ep" << c.ep << "_zero"
     << c.zero << (c.checkpointing ? "_recompute" : "") << (c.extra.empty() ? "" : "_" + c.extra)
     << (c.schedule.empty() ? "" : "_" + c.schedule);
  return os.str();
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

std::vector<Case> cases() {
  return {{"moe", 4, 1, 1, 1, 2, 0},
          {"moe", 4, 1, 1, 1, 2, 1},
          {"moe", 4, 1, 1, 1, 2, 2},
          {"moe", 4, 1, 1, 1, 2, 3},
          {"moe", 4, 1, 1, 1, 4, 0},
          {"moe", 4, 1, 1, 1, 4, 3, true},
          {"moe", 2, 1, 2, 1, 2, 0},
          {"moe", 2, 1, 2, 1, 2, 3},
          {"moe", 1, 4, 1, 1, 1, 0},
          {"moe_sparse", 1, 4, 1, 1, 1, 0, false, "", "gpipe"},
          {"moe_sparse", 2, 2, 1, 1, 1, 1, false, "", "interleaved"},
          {"moe", 2, 2, 1, 1, 1, 3},
          {"moe_sparse", 1, 2, 2, 1, 1, 0},
          {"moe_sparse", 1, 2, 2, 1, 1, 0, true, "", "interleaved"},
          {"moe_deep", 2, 2, 1, 1, 1, 1, false, "", "interleaved"},
          {"moe_sparse", 2, 2, 1, 1, 2, 1},
          {"moe_sparse", 2, 2, 1, 1, 2, 3, true},
          {"moe_quiet", 2, 2, 1, 1, 2, 1},
          {"moe_quiet_sparse", 2, 2, 1, 1, 2, 1},
          {"moe_quiet_sparse", 1, 2, 2, 1, 1, 0},
          {"moe_quiet", 2, 1, 1, 2, 2, 1},
          {"moe_quiet", 2, 1, 1, 2, 4, 3},
          {"moe_lora", 4, 1, 1, 1, 2, 3},
          {"moe_lora", 2, 1, 2, 1, 2, 1},
          {"moe", 4, 1, 1, 1, 2, 2, false, "offload"},
          {"moe", 4, 1, 1, 1, 2, 3, false, "offload_param"},
          {"moe_quiet", 2, 2, 1, 1, 2, 1, false, "offload"},
          {"moe_shared", 4, 1, 1, 1, 2, 3},
          {"moe_shared", 2, 1, 2, 1, 2, 1},
          {"moe_shared_lora", 4, 1, 1, 1, 2, 3},
          {"moe_shared_lora", 2, 1, 2, 1, 2, 1},
          {"moe_expert_lora", 4, 1, 1, 1, 2, 3},
          {"moe_expert_lora", 2, 1, 2, 1, 2, 1},
          {"moe_expert_lora", 2, 2, 1, 1, 2, 3, true}};
}

// What the AddressSanitizer + UBSan suite runs (tandem_mpi_subset): the exchange at ZeRO-3 with its experts' own
// gathers, beside tp, with the frozen experts of LoRA, and with the experts' own adapters.
std::map<std::string, std::vector<std::string>> subsets() {
  return {{"sanitized",
           {"moe_dp4_pp1_tp1_cp1_ep2_zero3", "moe_dp2_pp1_tp2_cp1_ep2_zero0", "moe_lora_dp4_pp1_tp1_cp1_ep2_zero3",
            "moe_expert_lora_dp4_pp1_tp1_cp1_ep2_zero3"}}};
}

Json base_config(const std::string& model, int dp) {
  Json cfg = {{"train_batch_size", 8},
              {"gradient_accumulation_steps", 4 / dp},
              {"steps", 4},
              {"seed", 5},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}, {"weight_decay", 0.1}, {"eps", 1e-6}}}}},
              {"gradient_clipping", 1.0},
              {"eval", {{"data", {{"type", "synthetic"}}}, {"steps", 2}}},
              {"data", {{"type", "synthetic"}}}};
  const bool sparse = model == "moe_sparse" || model == "moe_deep" || model == "moe_quiet_sparse";
  cfg["model"] = {{"type", "llama"},
                  {"family", "qwen3_moe"},
                  {"vocab_size", 64},
                  {"seq_len", 16},
                  {"hidden_size", 32},
                  {"intermediate_size", 48},
                  {"num_hidden_layers", model == "moe_deep" ? 4 : 2},
                  {"num_attention_heads", 4},
                  {"num_key_value_heads", 2},
                  {"head_dim", 8},
                  {"num_experts", 4},
                  {"num_experts_per_tok", 2},
                  {"moe_intermediate_size", 24},
                  {"norm_topk_prob", true},
                  {"mlp_only_layers", sparse ? Json::array() : Json::array({1})},
                  {"output_router_logits", model == "moe" || model == "moe_sparse" || model == "moe_deep"},
                  {"router_aux_loss_coef", 0.05}};
  if (model == "moe_shared" || model == "moe_shared_lora") {
    cfg["model"]["family"] = "qwen2_moe";
    cfg["model"]["qkv_bias"] = true;
    cfg["model"]["norm_topk_prob"] = false;
    cfg["model"]["shared_expert_intermediate_size"] = 24;
    cfg["model"]["output_router_logits"] = true;
  }
  if (model == "moe_lora")
    cfg["lora"] = {{"r", 4}, {"lora_alpha", 8}, {"target_modules", {"q_proj", "v_proj"}}, {"init_lora_weights", false}};
  if (model == "moe_expert_lora")
    cfg["lora"] = {{"r", 4},
                   {"lora_alpha", 8},
                   {"target_modules", {"q_proj"}},
                   {"target_parameters", {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}},
                   {"init_lora_weights", false}};
  if (model == "moe_shared_lora")
    cfg["lora"] = {{"r", 4},
                   {"lora_alpha", 8},
                   {"lora_dropout", 0.1},
                   {"target_modules", {"q_proj", "gate_proj", "up_proj", "down_proj", "shared_expert_gate"}},
                   {"init_lora_weights", false}};
  return cfg;
}

// The one-device run of each model, computed once on rank 0 (its micro-batches of 2 sequences, as every layout's).
const Result& reference(const std::string& model) {
  static std::map<std::string, Result> cache;
  auto it = cache.find(model);
  if (it == cache.end()) it = cache.emplace(model, run_training(base_config(model, 1), nullptr)).first;
  return it->second;
}

Json layout_config(const Case& c) {
  Json cfg = base_config(c.model, c.dp);
  cfg["zero_optimization"] = {{"stage", c.zero}};
  cfg["parallel"] = {{"virtual_gpus", c.dp}, {"pipeline", c.pp}, {"tensor", c.tp},
                     {"context", c.cp},      {"expert", c.ep},   {"activation_checkpointing", c.checkpointing},
                     {"timeout_s", 120}};
  if (!c.schedule.empty()) cfg["parallel"]["schedule"] = c.schedule;
  if (c.schedule == "interleaved") cfg["parallel"]["virtual_stages"] = 2;
  if (c.extra == "offload" || c.extra == "offload_param")
    cfg["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  if (c.extra == "offload_param") cfg["zero_optimization"]["offload_param"] = {{"device", "cpu"}};
  return cfg;
}

layout::Layout layout_of(const Case& c) {
  layout::Layout l{c.dp, c.pp, c.tp, c.cp};
  l.ep = c.ep;
  return l;
}

class ExpertParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ExpertParallel, SameLossesAndParametersAsOneDevice) {
  const Case& c = GetParam();
  layout::Groups groups = layout::make_groups(testing::mpi_world(), layout_of(c));
  const Result got = run_training(layout_config(c), &groups);
  // As test_equivalence.cc's llama: tp sums the input gradients' partial sums in another order (LoRA's factors feel it
  // most).
  const bool lora = c.model == "moe_lora" || c.model == "moe_shared_lora" || c.model == "moe_expert_lora";
  const Bounds b = c.tp == 1 ? kF32 : lora ? kF32LoraTp : kF32TpLlama;
  int failures = 0;
  if (testing::mpi_world().rank() == 0) {
    const Distance d = compare_to_one_device(got, reference(c.model), b, b.loss);
    // The balance metrics too: each expert slot counts the tokens it routes, each pipeline stage its own layers'.
    failures = d.failures + compare_moe_metrics(got, reference(c.model), b.loss);
    std::printf(
        "[fp32] %s against one device: first loss %.1e, first gradient norm %.1e, any loss %.1e, a tensor %.1e, "
        "all %.1e\n",
        case_name(c).c_str(), d.first_loss, d.first_grad_norm, d.worst_loss, d.worst_tensor, d.all);
  }
  // Every rank reports rank 0's verdict, so the job's exit code is the same everywhere.
  EXPECT_EQ(groups.world->all_reduce_scalar(failures), 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ExpertParallel,
                         ::testing::ValuesIn(testing::select_subset(cases(), case_name, "ExpertParallel", subsets())),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// Deterministic: the same layout trained twice gives the same bits (the exchanges move values and sum nothing; each
// expert's rows keep their order).
TEST(ExpertParallelRuns, TheSameBitsTwice) {
  const Case c{"moe", 4, 1, 1, 1, 2, 3};
  layout::Groups groups = layout::make_groups(testing::mpi_world(), layout_of(c));
  EXPECT_EQ(runs_differ(layout_config(c), groups), 0);
}

// Under pipelines alone the balance sums are added in one device's layer order, each stage after the stage before it,
// and every other sum the loss and the parameters take is the one device's too: the same bits as one device, every
// step's loss, the held-out loss and the final parameters. (The gradient norm's sum of squares is summed stage by
// stage, so only it may differ, in its last bits, without moving the clipped update's.)
TEST(ExpertParallelRuns, PipelinesGiveOneDevicesBits) {
  for (const std::string schedule : {"", "gpipe"}) {
    const Case c{"moe_sparse", 1, 4, 1, 1, 1, 0, false, "", schedule};
    layout::Groups groups = layout::make_groups(testing::mpi_world(), layout_of(c));
    const Result got = run_training(layout_config(c), &groups);
    int differ = 0;
    if (testing::mpi_world().rank() == 0) {
      SCOPED_TRACE(case_name(c));
      const Result& want = reference(c.model);
      EXPECT_EQ(got.losses, want.losses);
      EXPECT_EQ(got.val_loss, want.val_loss);
      EXPECT_EQ(got.params, want.params);
      differ = (got.losses != want.losses) + (got.val_loss != want.val_loss) + (got.params != want.params);
    }
    EXPECT_EQ(groups.world->all_reduce_scalar(differ), 0);
  }
}

}  // namespace
}  // namespace tandem
