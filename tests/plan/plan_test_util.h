// Shared by the planner's memory tests: the grid's model configs and cases, the prediction for one rank, and the
// predicted-vs-measured table they print (the figures docs/planner.md quotes).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/layout/groups.h"
#include "tandem/plan/memory_model.h"
#include "tandem/plan/planned_model.h"
#include "tandem/train/trainer.h"

namespace tandem::testing {

using config::Json;

struct MemCase {
  // "gpt" | "mlp" | "llama" | "llama_lora" (LoRA on every projection of a frozen llama) | "llama_docs" (a llama whose
  // attention stays inside documents: data.document_mask) | "llama_fp8" (its block projections in FP8) |
  // "llama_fp8_rowwise" | "llama_fp8_blockwise" (the other recipes) | "llama_qwen3" (Qwen3's per-head norms of q and
  // k, on heads of 32 where hidden / heads is 16) | "llama_qwen3_moe" (its mixture of experts: layers 0 and 2 of 8
  // experts of 48, top 2, the balance loss in the loss; the measured routing is the model's, the prediction balanced) |
  // "llama_qwen2_moe" (Qwen2-MoE's: the same experts with a shared expert of 32 and biases on q, k, v) |
  // "llama_qwen3_moe_every" (the same with every token routed to each of 4 experts: balanced whatever the router says,
  // so the rows an expert slot receives under expert parallelism are the prediction's) | "llama_olmoe_every" (OLMoE's
  // whole q and k norms, every layer's token routed to each of 4 experts) | "llama_qwen3_moe_lora" and
  // "llama_qwen3_moe_every_lora" (those two with LoRA on q and v and on the experts' gate_up and down: an adapter per
  // expert, PEFT's target_parameters)
  std::string model;
  int dp = 1, pp = 1, tp = 1, zero = 0;
  int cp = 1;                     // parallel.context: each sequence over cp processes
  std::string context_attention;  // parallel.context_attention ("": the default, auto)
  int ep = 1;                     // parallel.expert: the experts over ep replicas
  spec::ScheduleKind schedule = spec::ScheduleKind::OneFOneB;
  int virtual_stages = 1;
  bool ckpt = false;
  bool cpu_ckpt = false;        // with ckpt: the checkpointed layer inputs in host memory (parallel.cpu_checkpointing)
  int cpu_ckpt_layers = -1;     // with cpu_ckpt: how many of each chunk's first layers' (-1: all that can)
  bool keep_attention = false;  // with ckpt: attention's output kept for the recomputation (parallel.keep_attention)
  int64_t micro = 2;
  int64_t global = 8;
  bool bf16 = false;  // compute in bf16: fp32 master, bf16 values and activations
  int steps = 2;      // the peak comes in the first; a second shows nothing is left over from it
  // "": none; "cpu": the optimizer to host memory; "param": parameters too; "nvme": the optimizer to a swap file;
  // "param-nvme": both to swap files
  std::string offload;

  // "gpt dp2 pp1 tp1 zero3 micro 2x2 ...": what the tables print.
  std::string name() const {
    std::ostringstream os;
    os << model << " dp" << dp << " pp" << pp << " tp" << tp << (cp > 1 ? " cp" + std::to_string(cp) : "")
       << (context_attention.empty() ? "" : " " + context_attention) << (ep > 1 ? " ep" + std::to_string(ep) : "")
       << " zero" << zero;
    if (pp > 1 || virtual_stages > 1)
      os << " " << spec::schedule_name(schedule) << (virtual_stages > 1 ? "-v" + std::to_string(virtual_stages) : "");
    os << " micro " << micro << "x" << global / (micro * dp) << (ckpt ? " ckpt" : "") << (cpu_ckpt ? " host" : "")
       << (cpu_ckpt_layers >= 0 ? std::to_string(cpu_ckpt_layers) : "") << (keep_attention ? " keep" : "")
       << (bf16 ? " bf16" : "") << (offload.empty() ? "" : " offload " + offload);
    return os.str();
  }
  // name() with every character but letters and digits made '_': a parameterised test's name.
  std::string test_name() const {
    std::string s = name();
    for (char& ch : s)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return s;
  }
};

// Small enough that a step takes milliseconds, large enough that weights and activations are most of the bytes:
// gpt ~0.3M parameters with (B, T, C) = (2, 64, 64) activations and 512-wide logits; mlp ~1.4M parameters.
// A case of the grid; the model is filled in per model.
inline MemCase mem_case(int dp, int pp, int tp, int zero = 0,
                        spec::ScheduleKind schedule = spec::ScheduleKind::OneFOneB, int virtual_stages = 1,
                        int64_t micro = 2, bool bf16 = false) {
  MemCase c;
  c.bf16 = bf16;
  c.dp = dp;
  c.pp = pp;
  c.tp = tp;
  c.zero = zero;
  c.schedule = schedule;
  c.virtual_stages = virtual_stages;
  c.micro = micro;
  return c;
}

inline Json model_config(const std::string& model) {
  const std::string lora = "_lora";
  if (model.size() > lora.size() && model.compare(model.size() - lora.size(), lora.size(), lora) == 0 &&
      model.find("_moe") != std::string::npos)
    return model_config(model.substr(0, model.size() - lora.size()));
  if (model == "llama_qwen2_moe") {
    Json m = model_config("llama_qwen3_moe");
    m["family"] = "qwen2_moe";
    m["qkv_bias"] = true;
    m["shared_expert_intermediate_size"] = 32;
    return m;
  }
  if (model == "llama_qwen3_moe_every") {
    Json m = model_config("llama_qwen3_moe");
    m["num_experts"] = 4;
    m["num_experts_per_tok"] = 4;
    return m;
  }
  if (model == "llama_olmoe_every") {  // every layer sparse, as many kv heads as heads, no balance loss
    Json m = model_config("llama_qwen3_moe_every");
    m["family"] = "olmoe";
    m["num_key_value_heads"] = 4;
    for (const char* key : {"norm_topk_prob", "decoder_sparse_step", "output_router_logits"}) m.erase(key);
    return m;
  }
  if (model == "llama_qwen3_moe")
    return {{"type", "llama"},
            {"vocab_size", 512},
            {"seq_len", 64},
            {"hidden_size", 64},
            {"intermediate_size", 96},
            {"num_hidden_layers", 4},
            {"head_dim", 32},
            {"family", "qwen3_moe"},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"num_experts", 8},
            {"num_experts_per_tok", 2},
            {"moe_intermediate_size", 48},
            {"norm_topk_prob", true},
            {"decoder_sparse_step", 2},
            {"output_router_logits", true}};
  if (model == "llama_qwen3")
    return {{"type", "llama"},          {"vocab_size", 512},       {"seq_len", 64},  {"hidden_size", 64},
            {"intermediate_size", 96},  {"num_hidden_layers", 4},  {"head_dim", 32}, {"family", "qwen3"},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
  if (model == "llama" || model == "llama_lora" || model == "llama_docs" || model.rfind("llama_fp8", 0) == 0)
    return {{"type", "llama"},          {"vocab_size", 512},       {"seq_len", 64},
            {"hidden_size", 64},        {"intermediate_size", 96}, {"num_hidden_layers", 4},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
  if (model == "gpt")
    return {{"type", "gpt"}, {"vocab_size", 512}, {"seq_len", 64}, {"dim", 64}, {"layers", 4}, {"heads", 4}};
  return {{"type", "mlp"}, {"sizes", {256, 512, 512, 512, 512, 64}}, {"activation", "gelu"}};
}

// The "lora" object of a model of the grid (none but llama_lora's and the mixtures of experts' with LoRA).
inline Json lora_config(const std::string& model) {
  if (model == "llama_qwen3_moe_lora" || model == "llama_qwen3_moe_every_lora")
    return {{"r", 8},
            {"lora_alpha", 16},
            {"target_modules", {"q_proj", "v_proj"}},
            {"target_parameters", {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}}};
  if (model != "llama_lora") return nullptr;
  return {{"r", 8}, {"lora_alpha", 16}, {"target_modules", "all-linear"}};
}

// The same model as the config's struct.
inline spec::ModelConfig typed_model(const std::string& model) {
  return config::parse(config::validate({{"model", model_config(model)}, {"train_batch_size", 8}})).model;
}
inline spec::LoraConfig typed_lora(const std::string& model) {
  return config::parse(
             config::validate({{"model", model_config(model)}, {"lora", lora_config(model)}, {"train_batch_size", 8}}))
      .lora;
}
// The "fp8" object of a model of the grid: enabled for llama_fp8 (tensorwise), llama_fp8_rowwise and
// llama_fp8_blockwise.
inline Json fp8_config(const std::string& model) {
  if (model.rfind("llama_fp8", 0) != 0) return {{"enabled", false}};
  const std::string recipe = model == "llama_fp8" ? "tensorwise" : model.substr(std::string("llama_fp8_").size());
  return {{"enabled", true}, {"recipe", recipe}};
}
// The model of the grid as the planner builds it: its struct with its LoRA and FP8 settings.
inline plan::PlannedModel planned(const std::string& model) {
  const config::TrainConfig t = config::parse(config::validate({{"model", model_config(model)},
                                                                {"lora", lora_config(model)},
                                                                {"fp8", fp8_config(model)},
                                                                {"train_batch_size", 8}}));
  return plan::planned_model(t.model, t.lora, t.fp8);
}

inline Json case_config(const MemCase& c) {
  Json cfg = {{"model", model_config(c.model)},
              {"data", {{"type", "synthetic"}}},
              {"train_batch_size", c.global},
              {"train_micro_batch_size_per_gpu", c.micro},
              {"steps", c.steps},
              {"seed", 5},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
              {"zero_optimization", {{"stage", c.zero}}},
              {"parallel",
               {{"virtual_gpus", c.dp},
                {"pipeline", c.pp},
                {"tensor", c.tp},
                {"schedule", spec::schedule_name(c.schedule)},
                {"activation_checkpointing", c.ckpt},
                {"timeout_s", 120}}}};
  if (c.virtual_stages > 1) cfg["parallel"]["virtual_stages"] = c.virtual_stages;
  if (c.cp > 1) cfg["parallel"]["context"] = c.cp;
  if (!c.context_attention.empty()) cfg["parallel"]["context_attention"] = c.context_attention;
  if (c.ep > 1) cfg["parallel"]["expert"] = c.ep;
  if (c.cpu_ckpt) cfg["parallel"]["cpu_checkpointing"] = true;
  if (c.cpu_ckpt && c.cpu_ckpt_layers >= 0) cfg["parallel"]["cpu_checkpointing_layers"] = c.cpu_ckpt_layers;
  if (c.keep_attention) cfg["parallel"]["keep_attention"] = true;
  if (c.bf16) cfg["bf16"] = {{"enabled", true}};
  if (!lora_config(c.model).is_null()) cfg["lora"] = lora_config(c.model);
  cfg["fp8"] = fp8_config(c.model);
  if (c.model == "llama_docs") cfg["data"] = {{"type", "synthetic"}, {"document_mask", true}, {"eos_token_id", 5}};
  if (!c.offload.empty()) {
    Json& z = cfg["zero_optimization"];
    z["stage"] = c.offload == "param" ? 3 : std::max(c.zero, 1);
    const bool nvme = c.offload == "nvme" || c.offload == "param-nvme";
    if (c.offload == "param-nvme") z["stage"] = 3;
    z["offload_optimizer"] = {{"device", nvme ? "nvme" : "cpu"}};
    if (c.offload == "cpu-half") z["offload_optimizer"]["ratio"] = 0.5;
    if (nvme) z["offload_optimizer"]["nvme_path"] = "/tmp";
    if (c.offload == "param") z["offload_param"] = {{"device", "cpu"}};
    if (c.offload == "param-nvme") z["offload_param"] = {{"device", "nvme"}, {"nvme_path", "/tmp"}};
  }
  return cfg;
}

inline plan::Setup case_setup(const MemCase& c) {
  plan::Setup s;
  s.plan = layout::resolve_parallel(config::parallel_config(case_config(c).at("parallel")), c.dp * c.pp * c.tp * c.cp);
  s.zero_stage = c.zero;
  s.micro_batch = c.micro;
  s.micro_batches = c.global / (c.micro * c.dp);
  s.dtype_bytes = c.bf16 ? 2 : 4;
  s.cpu_threads = omp_get_max_threads();
  s.documents = c.model == "llama_docs";
  const config::TrainConfig tc = config::parse(config::validate(case_config(c)));
  s.zero_stage = static_cast<int>(tc.zero_stage);
  s.offload_optimizer = tc.offload_optimizer;
  s.offload_param = tc.offload_param;
  return s;
}

// Trains case `c` for its steps as `rank` of its layout (stand-in groups), then hands the trainer to `inspect`.
inline void run_case(const MemCase& c, int rank, const std::function<void(train::Trainer&)>& inspect) {
  const config::TrainConfig cfg = config::parse(config::validate(case_config(c)), c.dp);
  layout::Layout l{c.dp, c.pp, c.tp, c.cp};
  l.ep = c.ep;
  layout::Groups groups = layout::make_stand_in_groups(l, rank);
  train::TrainOptions opt;
  opt.print = false;
  train::Trainer trainer =
      train::Trainer::from_config(cfg, layout::resolve_parallel(cfg.parallel, groups.layout.world()), opt, &groups);
  trainer.run();
  inspect(trainer);
}

// One row per case: the worst rank's prediction and measurement, and the largest error over its ranks.
struct MemRow {
  std::string name;
  int64_t predicted = 0, measured = 0;  // of the rank with the largest measured peak
  double worst_error = 0;               // max over ranks of |predicted - measured| / measured
};

inline std::string format_rows(const std::vector<MemRow>& rows) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "| %-44s | %12s | %12s | %8s |\n", "case (all ranks)", "predicted B", "measured B",
                "worst err");
  os << line << "|" << std::string(46, '-') << "|" << std::string(14, '-') << "|" << std::string(14, '-') << "|"
     << std::string(10, '-') << "|\n";
  double worst = 0;
  for (const MemRow& r : rows) {
    std::snprintf(line, sizeof line, "| %-44s | %12lld | %12lld | %7.3f%% |\n", r.name.c_str(),
                  static_cast<long long>(r.predicted), static_cast<long long>(r.measured), 100 * r.worst_error);
    os << line;
    worst = std::max(worst, r.worst_error);
  }
  std::snprintf(line, sizeof line, "%zu cases, worst error over every rank %.4f%%\n", rows.size(), 100 * worst);
  os << line;
  return os.str();
}

}  // namespace tandem::testing
