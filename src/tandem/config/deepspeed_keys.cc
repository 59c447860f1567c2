// DeepSpeed's documented config keys, one entry per key path: whether Tandem honours it, accepts it as having
// no effect, or refuses it for now, and why. docs/deepspeed.md is the same table for people. The check of a
// config's DeepSpeed keys against it (check_deepspeed_key) is here too; Tandem's own keys are in schema.cc.
#include "tandem/config/deepspeed_keys.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "tandem/config/fields.h"
#include "tandem/config/settings.h"
#include "tandem/core/error.h"

namespace tandem::config {
namespace {

using Values = std::vector<std::pair<Json, DsCategory>>;
constexpr DsCategory kHonoured = DsCategory::kHonoured;
constexpr DsCategory kNoEffect = DsCategory::kNoEffect;
constexpr DsCategory kRefused = DsCategory::kRefused;

constexpr const char* kMoreDevices = "or use more devices (tandem plan CONFIG --devices N says how many fit)";

// Read and checked by Tandem's schema (schema.cc): the table only records it.
DeepSpeedKey schema(std::string path, std::string note) {
  return {std::move(path), kHonoured, {}, std::move(note), "", true, false};
}
DeepSpeedKey no_effect(std::string path, std::string note) {
  return {std::move(path), kNoEffect, {}, std::move(note), "", false, false};
}
DeepSpeedKey no_effect_object(std::string path, std::string note) {
  return {std::move(path), kNoEffect, {}, std::move(note), "", false, true};
}
DeepSpeedKey refused_object(std::string path, std::string refusal) {
  return {std::move(path), kRefused, {}, "", std::move(refusal), false, true};
}
// A DeepSpeed object whose keys are judged one by one; `note` says what it is for.
DeepSpeedKey object(std::string path, std::string note) {
  return {std::move(path), kNoEffect, {}, std::move(note), "", false, false};
}
// `value` is what Tandem does anyway (honoured); any other value changes only how DeepSpeed gets there.
DeepSpeedKey honoured_when(std::string path, Json value, std::string note) {
  return {std::move(path), kNoEffect, Values{{std::move(value), kHonoured}}, std::move(note), "", false, false};
}
// `values` are what Tandem does (honoured: often the value that switches a feature off); any other value asks
// for something it does not do yet.
DeepSpeedKey only_when(std::string path, std::vector<Json> values, std::string note, std::string refusal) {
  Values v;
  for (Json& j : values) v.emplace_back(std::move(j), kHonoured);
  return {std::move(path), kRefused, std::move(v), std::move(note), std::move(refusal), false, false};
}

// The rows of the settings table (settings.h) at `object` and under it whose DeepSpeed name is their own: the keys
// Tandem's schema reads, with the table's line as the note. A marker here, expanded by with_settings.
DeepSpeedKey settings_of(std::string object) { return {std::move(object), kHonoured, {}, "", "", true, false}; }

// Each settings_of marker replaced by its rows, in the table's order; a row under an object that has a marker of its
// own goes there.
std::vector<DeepSpeedKey> with_settings(const std::vector<DeepSpeedKey>& keys) {
  std::vector<std::string> markers;
  for (const DeepSpeedKey& k : keys)
    if (k.schema && k.note.empty()) markers.push_back(k.path);
  const auto under = [](const std::string& path, const std::string& object) {
    return path == object || path.compare(0, object.size() + 1, object + ".") == 0;
  };
  std::vector<DeepSpeedKey> out;
  for (const DeepSpeedKey& k : keys) {
    if (!(k.schema && k.note.empty())) {
      out.push_back(k);
      continue;
    }
    for (const Setting& s : settings()) {
      if (s.deepspeed != "=" || !under(s.path, k.path)) continue;
      const bool deeper = std::any_of(markers.begin(), markers.end(), [&](const std::string& m) {
        return m.size() > k.path.size() && under(m, k.path) && under(s.path, m);
      });
      if (!deeper) out.push_back(schema(s.path, s.doc));
    }
  }
  return out;
}

std::vector<DeepSpeedKey> build_catalogue() {
  const std::string monitor = "Tandem writes every step's loss, rate and timing to OUT/metrics.jsonl instead";
  const std::string bucket = "Tandem reduces each layer's gradients in one message, with no buckets";
  const std::vector<DeepSpeedKey> keys = {
      // Batch size
      settings_of("train_batch_size"),
      settings_of("train_micro_batch_size_per_gpu"),
      settings_of("gradient_accumulation_steps"),
      honoured_when("managed_gradient_accumulation", true,
                    "Tandem steps the optimizer once per accumulation boundary; false changes only who calls step()"),
      // Optimizer
      settings_of("optimizer"),
      no_effect("optimizer.params.torch_adam",
                "chooses torch's Adam over DeepSpeed's fused kernel; both compute the same update, as Tandem's does"),
      no_effect("optimizer.params.fused", "an implementation choice of torch.optim; the update is the same"),
      no_effect("optimizer.params.foreach", "an implementation choice of torch.optim; the update is the same"),
      no_effect("optimizer.params.capturable", "an implementation choice of torch.optim; the update is the same"),
      no_effect("optimizer.params.differentiable", "an autograd option of torch.optim; Tandem has no autograd"),
      no_effect("optimizer.params.set_grad_none", "Tandem clears its gradient buffers itself before each step"),
      only_when("optimizer.params.bias_correction", {true}, "Tandem's Adam divides the moments by 1 - beta^step",
                "Tandem's Adam always corrects the moments' bias; remove it or set it to true"),
      only_when("optimizer.params.amsgrad", {false}, "false is Adam as Tandem computes it",
                "Tandem does not implement AMSGrad yet; remove it"),
      only_when("optimizer.params.maximize", {false}, "false is what Tandem does: it minimises the loss",
                "Tandem only minimises the loss; remove it"),
      only_when("optimizer.params.fp32_optimizer_states", {true}, "Tandem keeps Adam's moments in fp32",
                "Tandem keeps Adam's moments in fp32 only; remove it"),
      no_effect("optimizer.legacy_fusion", "a switch of DeepSpeed's old fused fp16 optimizer"),
      settings_of("gradient_clipping"),
      // Scheduler
      settings_of("scheduler"),
      only_when("scheduler.params.last_batch_iteration", {-1}, "-1 starts the schedule at the run's first step",
                "Tandem's schedule follows the run's step count; remove it, and continue a run with --resume"),
      // Communication
      {"communication_data_type",
       kRefused,
       {{Json("fp32"), kHonoured}, {Json(nullptr), kNoEffect}},
       "Tandem reduces gradients in fp32 in every precision mode",
       "Tandem reduces gradients in fp32 only; remove it or set it to \"fp32\"",
       false,
       false},
      no_effect("seq_parallel_communication_data_type", "Tandem has no sequence parallelism"),
      only_when("gradient_allreduce_op", {"mean"},
                "Tandem averages gradients over the data-parallel replicas (the loss is divided by the global "
                "batch)",
                "Tandem averages gradients over the data-parallel replicas only; remove it or set it to \"mean\""),
      honoured_when("prescale_gradients", false,
                    "Tandem divides the loss by the global batch before backward, so gradients travel already "
                    "averaged; where DeepSpeed divides changes only rounding"),
      honoured_when("gradient_predivide_factor", 1.0,
                    "Tandem divides the loss by the global batch before backward; where DeepSpeed divides changes "
                    "only rounding"),
      honoured_when("sparse_gradients", false,
                    "only changes how embedding gradients travel; Tandem reduces them dense, with the same values"),
      // FP16
      settings_of("fp16"),
      honoured_when("fp16.auto_cast", true, "Tandem casts float inputs to the compute dtype whatever the value"),
      only_when("fp16.consecutive_hysteresis", {false},
                "false is DeepSpeed's default; Tandem refills the hysteresis when it halves the scale",
                "Tandem does not refill the hysteresis after every good step yet; remove it"),
      only_when("fp16.fp16_master_weights_and_grads", {false}, "Tandem keeps fp32 master weights and gradients",
                "Tandem keeps master weights and gradients in fp32 only; remove it"),
      // BF16
      settings_of("bf16"),
      no_effect("bf16.immediate_grad_update",
                "when DeepSpeed's bf16 optimizer copies gradients; Tandem accumulates fp32 gradients in place"),
      only_when("bf16.check_grad_overflow", {false}, "Tandem does not skip bf16 steps",
                "Tandem does not check bf16 gradients for overflow yet (fp16's loss scaling skips such steps); "
                "remove it or set it to false"),
      only_when("bf16.check_overflow", {false}, "Tandem does not skip bf16 steps",
                "Tandem does not check bf16 gradients for overflow yet (fp16's loss scaling skips such steps); "
                "remove it or set it to false"),
      only_when("bf16.bf16_master_weights_and_grads", {false}, "Tandem keeps fp32 master weights and gradients",
                "Tandem keeps master weights and gradients in fp32 only; remove it"),
      only_when("bf16.bf16_optimizer_states", {false}, "Tandem keeps Adam's moments in fp32",
                "Tandem keeps Adam's moments in fp32 only; remove it"),
      // Other mixed-precision front ends
      object("amp", "NVIDIA Apex's automatic mixed precision"),
      only_when("amp.enabled", {false}, "false: Apex is not used",
                "Tandem does not use Apex AMP; set \"bf16\": {\"enabled\": true} or \"fp16\": {\"enabled\": true} "
                "instead"),
      no_effect("amp.*", "passed to Apex's amp.initialize, which Tandem does not use"),
      object("torch_autocast", "torch.autocast mixed precision"),
      only_when("torch_autocast.enabled", {false}, "false: autocast is not used",
                "Tandem does not use torch.autocast; set \"bf16\": {\"enabled\": true} or \"fp16\": {\"enabled\": "
                "true} instead"),
      no_effect("torch_autocast.dtype", "used only with torch_autocast.enabled"),
      no_effect("torch_autocast.lower_precision_safe_modules", "used only with torch_autocast.enabled"),
      // ZeRO
      settings_of("zero_optimization"),
      honoured_when("zero_optimization.contiguous_gradients", true,
                    "Tandem keeps each layer's gradients in one flat buffer whatever the value"),
      honoured_when("zero_optimization.reduce_scatter", true,
                    "Tandem reduce-scatters gradients at stages 1-3; false asks for all-reduces, which give the "
                    "same values"),
      no_effect("zero_optimization.reduce_bucket_size", bucket),
      no_effect("zero_optimization.use_multi_rank_bucket_allreduce", bucket),
      honoured_when("zero_optimization.allgather_partitions", true,
                    "Tandem all-gathers the updated shards; false asks for broadcasts, which give the same values"),
      no_effect("zero_optimization.allgather_bucket_size", "Tandem all-gathers each layer in one message"),
      honoured_when("zero_optimization.overlap_comm", false,
                    "Tandem's gradient reductions do not overlap backward compute yet; the values are the same"),
      honoured_when("zero_optimization.load_from_fp32_weights", true,
                    "Tandem's checkpoints hold the fp32 master weights, and a resume starts from them"),
      honoured_when("zero_optimization.elastic_checkpoint", true, "Tandem's checkpoints load in any layout anyway"),
      no_effect("zero_optimization.grad_hooks",
                "Tandem reduces a layer's gradients when backward is done with it (stages 2, 3) or at the step's "
                "end (0, 1)"),
      settings_of("zero_optimization.offload_param"),
      no_effect("zero_optimization.offload_param.buffer_size",
                "Tandem's swap buffers hold one layer each, sized by the layer"),
      no_effect("zero_optimization.offload_param.max_in_cpu",
                "with \"nvme\" Tandem keeps no weights in host memory beyond its swap buffers"),
      settings_of("zero_optimization.offload_optimizer"),
      no_effect("zero_optimization.offload_optimizer.pipeline_read",
                "Tandem's swap always reads the next layer's state ahead of its update"),
      no_effect("zero_optimization.offload_optimizer.pipeline_write",
                "Tandem's swap always writes a layer's state back behind the next update"),
      no_effect("zero_optimization.offload_optimizer.fast_init",
                "Tandem draws the offloaded state's initial values in place, by logical element"),
      no_effect("zero_optimization.offload_optimizer.super_offload", "a DeepSpeed scheduling of its CPU optimizer"),
      no_effect("zero_optimization.offload_optimizer.cpuadam_cores_perc",
                "the host AdamW uses the OpenMP threads the rank runs with (OMP_NUM_THREADS)"),
      refused_object("zero_optimization.zenflow",
                     std::string("ZenFlow runs optimizer steps on the CPU, which Tandem does not do yet; remove it, ") +
                         kMoreDevices),
      no_effect("zero_optimization.sub_group_size", "Tandem steps the optimizer one layer's shard at a time"),
      schema("zero_optimization.cpu_offload",
             "DeepSpeed's older spelling: true is offload_optimizer {\"device\": \"cpu\"}"),
      schema("zero_optimization.cpu_offload_param",
             "DeepSpeed's older spelling: true is offload_param {\"device\": \"cpu\"}"),
      schema("zero_optimization.cpu_offload_use_pin_memory",
             "DeepSpeed's older spelling of the offload objects' pin_memory"),
      no_effect("zero_optimization.stage3_prefetch_bucket_size",
                "Tandem gathers a layer's weights just before the layer runs, with no prefetch"),
      no_effect("zero_optimization.stage3_param_persistence_threshold",
                "Tandem shards every layer's weights at stage 3, small ones too"),
      no_effect("zero_optimization.stage3_model_persistence_threshold",
                "Tandem shards every layer's weights at stage 3, small ones too"),
      no_effect("zero_optimization.stage3_max_live_parameters",
                "Tandem holds the gathered weights of the layer in use only, and frees them right after"),
      no_effect("zero_optimization.stage3_max_reuse_distance",
                "Tandem frees a layer's gathered weights right after use"),
      no_effect("zero_optimization.stage3_gather_16bit_weights_on_model_save",
                "tandem export writes the whole weights from any layout's checkpoint"),
      no_effect("zero_optimization.stage3_gather_fp16_weights_on_model_save",
                "tandem export writes the whole weights from any layout's checkpoint"),
      no_effect("zero_optimization.stage3_module_granularity_threshold", "Tandem gathers weights layer by layer"),
      no_effect("zero_optimization.stage3_use_all_reduce_for_fetch_params",
                "an all-reduce and an all-gather fetch the same weights"),
      no_effect("zero_optimization.stage3_allgather_sequential", "how DeepSpeed orders its gathers"),
      no_effect("zero_optimization.ignore_unused_parameters", "every parameter of Tandem's models gets a gradient"),
      no_effect("zero_optimization.legacy_stage1", "DeepSpeed's old stage-1 implementation"),
      no_effect("zero_optimization.round_robin_gradients",
                "an ordering of DeepSpeed's gradient copies to the host; Tandem copies each layer's shard as its "
                "backward ends"),
      only_when("zero_optimization.zero_hpz_partition_size", {1, 0}, "1: no secondary partition",
                "Tandem does not keep ZeRO++'s secondary weight partition (hpZ) yet; remove it"),
      only_when("zero_optimization.zero_quantized_weights", {false}, "false: weights travel unquantized",
                "Tandem does not quantize the weights it gathers (ZeRO++ qwZ) yet; remove it"),
      only_when("zero_optimization.zero_quantized_nontrainable_weights", {false}, "false: weights travel unquantized",
                "Tandem does not quantize the weights it gathers (ZeRO++ qwZ) yet; remove it"),
      only_when("zero_optimization.zero_quantized_gradients", {false}, "false: gradients travel unquantized",
                "Tandem does not quantize the gradients it reduces (ZeRO++ qgZ) yet; remove it"),
      no_effect("zero_optimization.zeropp_loco_param", "used only with zero_quantized_gradients, which Tandem refuses"),
      only_when("zero_optimization.mics_shard_size", {-1}, "-1: no MiCS",
                "Tandem does not shard within MiCS groups yet; remove it (parallel.virtual_gpus and "
                "zero_optimization.stage choose how Tandem shards)"),
      no_effect("zero_optimization.mics_hierarchical_params_gather", "used only with MiCS, which Tandem refuses"),
      no_effect("zero_optimization.memory_efficient_linear",
                "how DeepSpeed's ZeRO-3 linear layer saves its input; Tandem's layers save their own"),
      no_effect("zero_optimization.pipeline_loading_checkpoint", "how DeepSpeed loads pipeline checkpoints"),
      no_effect("zero_optimization.override_module_apply", "a hook into torch's Module.apply"),
      no_effect("zero_optimization.log_trace_cache_warnings", "DeepSpeed's ZeRO-3 trace cache"),
      no_effect("zero_optimization.enable_sanity_checks", "DeepSpeed's internal checks"),
      no_effect("zero_optimization.save_muon_momentum_buffer_in_memory", "the Muon optimizer, which Tandem refuses"),
      no_effect_object("zero_optimization.leaf_module", "which torch modules ZeRO-3 fetches whole"),
      // Asynchronous I/O, tensor and expert parallelism, hybrid engine
      no_effect_object("aio",
                       "DeepSpeed's libaio settings; Tandem's nvme swap reads and writes each layer's state in one "
                       "request of its own threads"),
      settings_of("sequence_parallel_size"),
      object("tensor_parallel", "DeepSpeed's AutoTP"),
      only_when("tensor_parallel.autotp_size", {0, 1}, "0 or 1: no AutoTP",
                "Tandem does not use DeepSpeed's AutoTP; remove it and set parallel.tensor instead"),
      no_effect("tensor_parallel.preset_model", "used only with AutoTP"),
      no_effect("tensor_parallel.tp_overlap_comm", "used only with AutoTP"),
      no_effect_object("tensor_parallel.partition_config", "used only with AutoTP"),
      object("expert_parallel", "DeepSpeed's AutoEP for mixture-of-experts models"),
      schema("expert_parallel.enabled", "true: the experts spread over autoep_size ranks (Tandem's parallel.expert)"),
      schema("expert_parallel.autoep_size", "Tandem's parallel.expert: the ranks each layer's experts are spread over"),
      no_effect("expert_parallel.*", "DeepSpeed's model presets and kernels: Tandem finds the experts by the model"),
      no_effect_object("hybrid_engine", "switches to DeepSpeed's inference kernels for generation; Tandem only trains"),
      // Logging
      settings_of("steps_per_print"),
      honoured_when("wall_clock_breakdown", false,
                    "Tandem prints every step's time and writes it to metrics.jsonl anyway"),
      honoured_when("memory_breakdown", false, "tandem train prints each device's predicted and measured peak anyway"),
      honoured_when("dump_state", false, "Tandem prints its layout and the planner's prediction instead"),
      no_effect_object("autotuning", "Tandem's layout search is tandem plan and \"parallel\": \"auto\""),
      object("flops_profiler", "DeepSpeed's FLOPs profiler"),
      honoured_when("flops_profiler.enabled", false, monitor),
      no_effect("flops_profiler.profile_step", monitor),
      no_effect("flops_profiler.module_depth", monitor),
      no_effect("flops_profiler.top_modules", monitor),
      no_effect("flops_profiler.detailed", monitor),
      no_effect("flops_profiler.output_file", monitor),
      // Activation checkpointing
      object("activation_checkpointing",
             "settings of deepspeed.checkpointing; Tandem's is "
             "parallel.activation_checkpointing"),
      only_when("activation_checkpointing.partition_activations", {false}, "false: activations are not partitioned",
                "Tandem does not partition checkpointed activations yet; remove it and set "
                "parallel.activation_checkpointing (each layer is recomputed) instead"),
      schema("activation_checkpointing.cpu_checkpointing",
             "true: the checkpointed layer inputs wait in host memory, as parallel.cpu_checkpointing (needs "
             "parallel.activation_checkpointing)"),
      no_effect("activation_checkpointing.contiguous_memory_optimization",
                "used with partition_activations, which Tandem refuses"),
      no_effect("activation_checkpointing.number_checkpoints", "used with partition_activations, which Tandem refuses"),
      no_effect("activation_checkpointing.synchronize_checkpoint_boundary",
                "a device synchronisation in deepspeed.checkpointing"),
      no_effect("activation_checkpointing.profile", "timing of deepspeed.checkpointing"),
      // Features that change what is trained
      refused_object("sparse_attention",
                     "Tandem's attention is dense causal attention; it does not do block-sparse attention yet; "
                     "remove it"),
      object("data_efficiency", "curriculum learning and random layer-token dropping"),
      only_when("data_efficiency.enabled", {false}, "false: none of it applies",
                "Tandem does not do curriculum learning or random layer-token dropping yet; remove it"),
      no_effect("data_efficiency.seed", "used only with data_efficiency.enabled"),
      no_effect_object("data_efficiency.data_routing", "used only with data_efficiency.enabled"),
      no_effect_object("data_efficiency.data_sampling", "used only with data_efficiency.enabled"),
      object("curriculum_learning", "the older curriculum-learning settings"),
      only_when("curriculum_learning.enabled", {false}, "false: no curriculum",
                "Tandem does not do curriculum learning yet; remove it"),
      no_effect("curriculum_learning.curriculum_type", "used only with curriculum_learning.enabled"),
      no_effect("curriculum_learning.min_difficulty", "used only with curriculum_learning.enabled"),
      no_effect("curriculum_learning.max_difficulty", "used only with curriculum_learning.enabled"),
      no_effect("curriculum_learning.schedule_type", "used only with curriculum_learning.enabled"),
      no_effect_object("curriculum_learning.schedule_config", "used only with curriculum_learning.enabled"),
      object("progressive_layer_drop", "progressive layer dropping"),
      only_when("progressive_layer_drop.enabled", {false}, "false: no layer is dropped",
                "Tandem does not drop layers during training yet; remove it"),
      no_effect("progressive_layer_drop.theta", "used only with progressive_layer_drop.enabled"),
      no_effect("progressive_layer_drop.gamma", "used only with progressive_layer_drop.enabled"),
      refused_object("compression_training",
                     "Tandem does not compress models (quantization, pruning, layer reduction) yet; remove it"),
      refused_object("weight_quantization", "Tandem does not quantize weights yet; remove it"),
      refused_object("quantize_training", "Tandem does not do quantization-aware training yet; remove it"),
      no_effect_object("eigenvalue", "Hessian eigenvalues for DeepSpeed's quantization and layer-drop schedules"),
      // Monitoring
      settings_of("tensorboard"),
      object("wandb", "Weights & Biases logging"),
      honoured_when("wandb.enabled", false, monitor),
      no_effect("wandb.group", monitor),
      no_effect("wandb.team", monitor),
      no_effect("wandb.project", monitor),
      object("comet", "Comet logging"),
      honoured_when("comet.enabled", false, monitor),
      no_effect("comet.workspace", monitor),
      no_effect("comet.project", monitor),
      no_effect("comet.samples_log_interval", monitor),
      no_effect("comet.experiment_name", monitor),
      no_effect("comet.api_key", monitor),
      no_effect("comet.experiment_key", monitor),
      no_effect("comet.online", monitor),
      no_effect("comet.mode", monitor),
      settings_of("csv_monitor"),
      object("comms_logger", "a log of every collective"),
      honoured_when("comms_logger.enabled", false, "Tandem does not log collectives; its watchdog names a hung one"),
      no_effect("comms_logger.verbose", "Tandem does not log collectives; its watchdog names a hung one"),
      no_effect("comms_logger.prof_all", "Tandem does not log collectives; its watchdog names a hung one"),
      no_effect("comms_logger.debug", "Tandem does not log collectives; its watchdog names a hung one"),
      no_effect("comms_logger.prof_ops", "Tandem does not log collectives; its watchdog names a hung one"),
      // Elastic training
      object("elasticity", "elastic training: batch sizes chosen for a varying number of GPUs"),
      only_when("elasticity.enabled", {false}, "false: the batch sizes are the config's",
                "Tandem does not do elastic training yet: its batch sizes come from the config; remove it"),
      no_effect("elasticity.max_train_batch_size", "used only with elasticity.enabled"),
      no_effect("elasticity.micro_batch_sizes", "used only with elasticity.enabled"),
      no_effect("elasticity.min_gpus", "used only with elasticity.enabled"),
      no_effect("elasticity.max_gpus", "used only with elasticity.enabled"),
      no_effect("elasticity.min_time", "used only with elasticity.enabled"),
      no_effect("elasticity.prefer_large_batch", "used only with elasticity.enabled"),
      no_effect("elasticity.version", "used only with elasticity.enabled"),
      no_effect("elasticity.ignore_non_elastic_batch_info", "used only with elasticity.enabled"),
      no_effect("elasticity.num_gpus_per_node", "used only with elasticity.enabled"),
      no_effect("elasticity.model_parallel_size", "used only with elasticity.enabled"),
      // Checkpoints: Tandem's own object has every, keep and at_end; DeepSpeed's keys sit beside them.
      settings_of("checkpoint"),
      no_effect("checkpoint.tag_validation", "Tandem checks each file's CRC32 and the parameter set on load instead"),
      honoured_when("checkpoint.load_universal", true, "Tandem's checkpoints load in any layout anyway"),
      no_effect("checkpoint.use_node_local_storage", "every rank writes into the run's one checkpoint folder"),
      object("checkpoint.parallel_write", "parallel checkpoint writing"),
      no_effect("checkpoint.parallel_write.pipeline_stage", "every rank writes its own file in parallel anyway"),
      // Data types
      object("data_types", "the dtypes of DeepSpeed's buffers"),
      {"data_types.grad_accum_dtype",
       kRefused,
       {{Json("fp32"), kHonoured}, {Json(nullptr), kNoEffect}},
       "Tandem accumulates gradients in fp32 in every precision mode",
       "Tandem accumulates gradients in fp32 only; remove it or set it to \"fp32\"",
       false,
       false},
      // The rest of DeepSpeed's top level
      no_effect_object("pipeline",
                       "DeepSpeed's PipelineModule settings; Tandem's are parallel.pipeline and "
                       "parallel.schedule"),
      no_effect("zero_allow_untested_optimizer", "Tandem's ZeRO runs with its own Adam and AdamW"),
      no_effect("zero_force_ds_cpu_optimizer",
                "DeepSpeed's check that an offloaded run uses its CPU Adam; Tandem's offload always runs its own host "
                "AdamW"),
      no_effect("disable_allgather", "a switch of DeepSpeed's old ZeRO-1"),
      no_effect("dataloader_drop_last", "Tandem's sampler draws every batch whole"),
      no_effect("vocabulary_size", "Tandem takes the vocabulary from model.vocab_size"),
      no_effect("graph_harvesting", "CUDA graph capture in DeepSpeed's optimizer"),
      no_effect("use_data_before_expert_parallelism",
                "the rank order of expert parallelism: Tandem's expert groups are neighbouring replicas"),
      no_effect("log_level", "DeepSpeed's logger"),
      no_effect_object("timers", "DeepSpeed's internal timers"),
      no_effect_object("compile", "DeepSpeed's torch.compile passes (DeepCompile)"),
      no_effect_object("nebula", "a checkpoint service of Azure"),
      no_effect_object("datastates", "an asynchronous checkpoint engine"),
  };
  return with_settings(keys);
}

// The catalogue's index: each key's entry, and each object's keys (with "*" for a catch-all).
struct Index {
  std::vector<DeepSpeedKey> keys;
  std::map<std::string, size_t> by_path;
  std::map<std::string, std::vector<std::string>> children;  // "" for the top level
};

const Index& index() {
  static const Index idx = [] {
    Index i;
    i.keys = build_catalogue();
    for (size_t k = 0; k < i.keys.size(); ++k) {
      const std::string& p = i.keys[k].path;
      TANDEM_CHECK(i.by_path.emplace(p, k).second, "the DeepSpeed catalogue lists '", p, "' twice");
      const size_t dot = p.rfind('.');
      i.children[dot == std::string::npos ? "" : p.substr(0, dot)].push_back(
          dot == std::string::npos ? p : p.substr(dot + 1));
    }
    return i;
  }();
  return idx;
}

const std::vector<std::string>& children_of(const std::string& path) {
  static const std::vector<std::string> none;
  const auto it = index().children.find(path);
  return it == index().children.end() ? none : it->second;
}

const DeepSpeedKey* lookup(const std::string& parent, const std::string& key) {
  const Index& i = index();
  const std::string full = parent.empty() ? key : parent + "." + key;
  auto it = i.by_path.find(full);
  if (it == i.by_path.end()) it = i.by_path.find(parent.empty() ? std::string("*") : parent + ".*");
  return it == i.by_path.end() ? nullptr : &i.keys[it->second];
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Judges one key of the DeepSpeed object at `parent`; see check_deepspeed_key.
bool judge(const std::string& parent, const std::string& key, Json& value, std::vector<std::string>& no_effect) {
  const DeepSpeedKey* k = lookup(parent, key);
  const std::string path = parent.empty() ? key : parent + "." + key;
  TANDEM_CHECK(k != nullptr, "'", path, "' is not in the DeepSpeed catalogue");
  const std::vector<std::string>& kids = children_of(k->path);
  if (!k->open && !kids.empty()) {
    if (value.is_null()) {  // DeepSpeed reads null as absent
      no_effect.push_back(path);
      return true;
    }
    Fields f(value, path);
    if (std::find(kids.begin(), kids.end(), "*") == kids.end()) f.only(kids);
    const size_t first = no_effect.size();
    bool all = true;
    for (auto& [sub, v] : value.items()) all = judge(path, sub, v, no_effect) && all;
    if (all) {  // an object that changes nothing is listed once
      no_effect.resize(first);
      no_effect.push_back(path);
    }
    return all;
  }
  DsCategory c = k->category;
  for (const auto& [v, category] : k->values)
    if (v == value) c = category;
  if (c == kRefused) TANDEM_FAIL(path, " ", show(value), ": ", k->refusal);
  if (c == kNoEffect) no_effect.push_back(path);
  return c == kNoEffect;
}

}  // namespace

const char* category_name(DsCategory c) {
  return c == kHonoured ? "honoured" : c == kNoEffect ? "no effect" : "refused";
}

const std::vector<DeepSpeedKey>& deepspeed_keys() { return index().keys; }

const DeepSpeedKey* find_deepspeed_key(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? lookup("", path) : lookup(path.substr(0, dot), path.substr(dot + 1));
}

std::vector<std::string> deepspeed_extras(const std::string& path) {
  std::vector<std::string> out;
  for (const std::string& key : children_of(path)) {
    const DeepSpeedKey* k = lookup(path, key);
    if (key != "*" && !k->schema) out.push_back(key);
  }
  return out;
}

bool check_deepspeed_key(const std::string& path, Json& value, std::vector<std::string>& no_effect) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? judge("", path, value, no_effect)
                                  : judge(path.substr(0, dot), path.substr(dot + 1), value, no_effect);
}

std::string deepspeed_type_refusal(const std::string& key, const std::string& type) {
  struct Refused {
    const char* key;
    const char* type;
    const char* instead;
  };
  static const Refused kTypes[] = {
      {"optimizer.type", "Lamb", "use \"Adam\" or \"AdamW\""},
      {"optimizer.type", "OneBitAdam", "use \"Adam\" or \"AdamW\" (Tandem's gradients travel uncompressed)"},
      {"optimizer.type", "ZeroOneAdam", "use \"Adam\" or \"AdamW\" (Tandem's gradients travel uncompressed)"},
      {"optimizer.type", "OneBitLamb", "use \"Adam\" or \"AdamW\" (Tandem's gradients travel uncompressed)"},
      {"optimizer.type", "Muon", "use \"Adam\" or \"AdamW\""},
      {"optimizer.type", "Lion", "use \"Adam\" or \"AdamW\""},
      {"optimizer.type", "Adagrad", "use \"Adam\" or \"AdamW\""},
      {"scheduler.type", "OneCycle", "use \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\""},
      {"scheduler.type", "LRRangeTest", "use \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\""},
  };
  for (const Refused& r : kTypes)
    if (key == r.key && lower(type) == lower(r.type))
      return std::string("Tandem does not implement DeepSpeed's ") + r.type + " yet; " + r.instead +
             " (docs/deepspeed.md)";
  return "";
}

}  // namespace tandem::config
