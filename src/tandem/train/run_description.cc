// The lines a run prints once before step 1 (run_description.h).
#include "tandem/train/run_description.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "tandem/ops/profile.h"
#include "tandem/train/compute_dtype.h"

namespace tandem::train {

namespace {

// "  lora: r 8, ..., 1.2M trainable parameters (0.9%) on a frozen base of ..."
std::string describe_lora(parallel::Engine& engine, const spec::LoraConfig& l) {
  // Logical parameters (global shapes), every tp slot's and stage's together: the model as one device holds it.
  int64_t trainable = 0, frozen = 0, adapters = 0;
  for (const nn::Parameter* p : engine.model().parameters()) {
    (p->trainable ? trainable : frozen) += shape_numel(p->global_shape);
    adapters += p->adapter ? 1 : 0;
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "  lora: r %lld, lora_alpha %g (scaling %g%s), lora_dropout %g; %lld adapters, %lld trainable "
                "parameters (%.3g%%) on a frozen base of %lld in %s\n",
                static_cast<long long>(l.r), l.lora_alpha, l.scaling(), l.use_rslora ? ", rsLoRA" : "", l.lora_dropout,
                static_cast<long long>(adapters / 2), static_cast<long long>(trainable),
                100.0 * static_cast<double>(trainable) / static_cast<double>(std::max<int64_t>(trainable + frozen, 1)),
                static_cast<long long>(frozen), dtype_name(engine.store().compute_dtype()).c_str());
  return line;
}

// "  fp8 (...): 6 of this rank's 8 block projections run their products in e4m3 ...": the experts of a mixture
// stay in the compute dtype (nn/llama.cc counts only its attention's projections).
std::string describe_fp8(parallel::Engine& engine, const spec::Fp8Config& fp8) {
  const nn::Model::Fp8Use use = engine.model().fp8_use();
  const int moe_layers = engine.model().moe_routing().layers;
  const std::string experts =
      moe_layers > 0 ? ", the routers and experts of the " + std::to_string(moe_layers) + " MoE layers" : "";
  char line[640];
  std::snprintf(
      line, sizeof line,
      "  fp8 (%s): %d of this rank's %d block projections run their products in e4m3 (inputs, weights) and "
      "%s (gradients)%s; attention, norms, embeddings%s, the head and the loss in %s\n",
      spec::fp8_recipe_name(fp8.recipe), use.fp8, use.projections, dtype_name(fp8.gradients).c_str(),
      use.fp8 < use.projections ? " (the others: fewer features than fp8.min_features, or not multiples of 16)" : "",
      experts.c_str(), dtype_name(engine.store().compute_dtype()).c_str());
  return line;
}

}  // namespace

void print_data(const config::TrainConfig& cfg, const data::Dataset& data, const data::Dataset* eval,
                const layout::Layout& l) {
  const auto& b = cfg.batch;
  std::printf("data: %s\n", data.describe().c_str());
  if (eval)
    std::printf("eval: %s; %lld batches every %s\n", eval->describe().c_str(), static_cast<long long>(cfg.eval.steps),
                cfg.eval.every > 0 ? (std::to_string(cfg.eval.every) + " steps and after the last").c_str()
                                   : "run, after the last step");
  std::printf("batch: %lld = micro %lld x accumulation %lld x virtual GPUs %lld; %lld steps\n",
              static_cast<long long>(b.global), static_cast<long long>(b.micro), static_cast<long long>(b.accum),
              static_cast<long long>(l.dp), static_cast<long long>(cfg.steps));
  std::fflush(stdout);
}

void print_setup(const config::TrainConfig& cfg, const layout::ParallelPlan& plan, const layout::Layout& l,
                 parallel::Engine& engine, DeviceKind kind, const Monitor* monitor) {
  std::printf("model: %s; layout %s (%d device%s as %d virtual GPU%s of %d), ZeRO stage %lld, %s compute%s\n",
              spec::model_type(cfg.model).c_str(), l.str().c_str(), l.world(), l.world() == 1 ? "" : "s", l.dp,
              l.dp == 1 ? "" : "s", l.vgpu_size(), static_cast<long long>(cfg.zero_stage),
              dtype_name(compute_dtype(cfg)).c_str(),
              !plan.activation_checkpointing ? ""
              : plan.cpu_checkpointing       ? ", activation checkpointing (the inputs in host memory)"
                                             : ", activation checkpointing");
  if (l.cp > 1)
    std::printf(
        "context: each sequence over %d devices, attention %s (parallel.context_attention %s)\n", l.cp,
        spec::context_attention_of(cfg.model, l.cp, l.tp, plan.context_attention) == spec::ContextAttention::Ring
            ? "by a ring of key/value blocks"
            : "by heads (all-to-all)",
        spec::context_attention_name(plan.context_attention).c_str());
  if (cfg.offload_optimizer.enabled()) {
    const bool gpu = kind == DeviceKind::Cuda;  // a CPU device's host memory is plain either way
    const auto where = [gpu](const spec::OffloadConfig& o) {
      return o.device == spec::OffloadDevice::Cpu
                 ? std::string(o.pin_memory && gpu ? "page-locked host memory" : "host memory")
                 : "swap files in " + o.nvme_path;
    };
    std::printf("offload: the optimizer state%s and its AdamW in %s", cfg.offload_optimizer.ratio < 1 ? " (part)" : "",
                where(cfg.offload_optimizer).c_str());
    if (cfg.offload_param.enabled()) std::printf("; the parameters in %s", where(cfg.offload_param).c_str());
    std::printf("\n");
  }
  std::printf("%s", layout::describe_rank_map(l, kind == DeviceKind::Cpu ? "cpu:" : "cuda:").c_str());
  std::printf("%s", engine.describe_stages().c_str());
  if (cfg.lora.enabled) std::printf("%s", describe_lora(engine, cfg.lora).c_str());
  if (cfg.fp8.enabled) std::printf("%s", describe_fp8(engine, cfg.fp8).c_str());
  if (l.pp > 1)
    std::printf("  schedule: %s, %lld micro-batches per step\n", spec::schedule_name(plan.schedule).c_str(),
                static_cast<long long>(cfg.batch.accum));
  if (monitor) std::printf("%s", monitor->describe().c_str());
  if (ops::profile::enabled())
    std::printf(
        "op profile on (TANDEM_PROFILE): every op is timed, the table follows the run; the timing slows "
        "the steps, so take speeds from a run without it\n");
  std::fflush(stdout);
}

}  // namespace tandem::train
