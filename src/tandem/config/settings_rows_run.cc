// The settings table's rows for LoRA, the run (fp8, tiles, the memory budgets), the layout and DeepSpeed's monitors
// (settings_row_kit.h makes them; settings_rows.cc puts them in the table's order).
#include "tandem/config/settings_row_kit.h"
#include "tandem/core/units.h"
#include "tandem/spec/schedule.h"

namespace tandem::config::rows {
namespace {

// A memory size: a size such as "512MiB" (core/units.h) or a byte count, checked by schema.cc, at the member reached
// from spec::TrainConfig through `m`.
template <class... M>
Field bytes(M... m) {
  return {[=](const Run& r) { return Json(member_of(r, m...)); },
          [=](Run& r, const Json& j) {
            auto& value = member_of(r, m...);
            using T = std::decay_t<decltype(value)>;
            value = j.is_string() ? static_cast<T>(parse_bytes(j.get<std::string>())) : j.get<T>();
          }};
}

}  // namespace

// "lora": PEFT's LoraConfig keys and defaults; none is written without the object. target_modules' default is the
// model family's (lora_config.cc).
std::vector<Setting> lora_rows() {
  using spec::LoraConfig;
  const auto lora = [](auto member) { return field(&Run::lora, member); };
  return {
      object("lora", "",
             "Hugging Face PEFT's LoRA adapters on a frozen gpt or llama (docs/huggingface.md); not beside the offload "
             "keys"),
      when_used(bound(lora(&LoraConfig::r), integer("lora.r", {}, 1, int64_t{1} << 16, "", "the adapters' rank"))),
      when_used(bound(lora(&LoraConfig::lora_alpha),
                      number("lora.lora_alpha", {}, 0.0, kInf, true, "",
                             "the scale's numerator: alpha / r (alpha / sqrt(r) with use_rslora)"))),
      when_used(
          bound(lora(&LoraConfig::lora_dropout), number("lora.lora_dropout", {}, 0.0, 1.0, false, "",
                                                        "dropout on each adapter's input while training, below 1"))),
      absent(of_shape("lora.target_modules", Json(), "names, or one string", "",
                      "module names matched against the end of each Hugging Face module name, \"all-linear\", or a "
                      "regular expression the whole name must match"),
             "the family's: q_proj and v_proj (GPT-2: c_attn)"),
      absent(of_shape("lora.target_parameters", Json(), "a list of names", "",
                      "a mixture of experts' stacked expert parameters, PEFT's: \"mlp.experts.gate_up_proj\" and "
                      "\"mlp.experts.down_proj\", an adapter of rank r per expert; not beside lora_dropout"),
             "none"),
      when_used(bound(lora(&LoraConfig::use_rslora),
                      boolean("lora.use_rslora", {}, "", "scale by alpha / sqrt(r) instead of alpha / r"))),
      when_used(choice("lora.bias", "none", {"none"}, "", "the base's biases stay frozen; PEFT's \"none\" only")),
      // Read by lora_config(): true, false or "gaussian" is one of three initialisations.
      when_used(of_shape("lora.init_lora_weights", Run{}.lora.init == spec::LoraInit::Default,
                         "true, false or \"gaussian\"", "",
                         "fresh adapters as PEFT starts them: true (A kaiming-uniform, B zeros), false (both as "
                         "torch's nn.Linear) or \"gaussian\"")),
      writes(
          lora(&LoraConfig::from_pretrained),
          string(
              "lora.from_pretrained", "",
              "a PEFT adapter folder to continue: its r, lora_alpha, target_modules, target_parameters, use_rslora and "
              "bias")),
      absent(of_shape("lora.task_type", Json(), "\"CAUSAL_LM\"", "", "PEFT's task type: a causal language model's"),
             "\"CAUSAL_LM\""),
  };
}

std::vector<Setting> monitor_rows(const std::string& key, spec::MonitorConfig Run::*which, const std::string& doc,
                                  const std::string& files) {
  using spec::MonitorConfig;
  return {
      object(key, "=", doc),
      bound(field(which, &MonitorConfig::enabled),
            boolean(key + ".enabled", {}, "=", "write the " + files + " (rank 0)")),
      bound(field(which, &MonitorConfig::output_path),
            of_shape(key + ".output_path", {}, "string", "=",
                     "their folder's parent; \"\" (the default): the run folder")),
      bound(field(which, &MonitorConfig::job_name),
            shaped(key + ".job_name", SettingType::String, {}, "=",
                   "their folder, inside output_path (default DeepSpeedJobName)")),
  };
}

// "fp8", "tiles" and the memory budgets.
std::vector<Setting> run_rows() {
  using spec::Fp8Config, spec::Fp8Recipe, spec::Tiles;
  const auto fp8 = [](auto member) { return field(&Run::fp8, member); };
  return {
      object("fp8", "", "the gpt's and the llama's block projections in FP8 (docs/fp8.md); not with fp16"),
      bound(fp8(&Fp8Config::enabled), boolean("fp8.enabled", {}, "", "the projections' products in FP8")),
      one_of("fp8.recipe",
             names_of({Fp8Recipe::Tensorwise, Fp8Recipe::Rowwise, Fp8Recipe::Blockwise}, spec::fp8_recipe_name), "",
             "the scales: one per tensor, one per row, or 1 x 128 and 128 x 128 tiles", &Run::fp8, &Fp8Config::recipe),
      bound(fp8(&Fp8Config::min_features),
            integer("fp8.min_features", {}, 0, kIntMax, "",
                    "a projection with fewer input or output features stays in the compute dtype")),
      one_of("fp8.gradient_format",
             Names<DType>{{DType::E5M2, dtype_name(DType::E5M2)}, {DType::E4M3, dtype_name(DType::E4M3)}}, "",
             "the output gradients' format; \"e4m3\" by default with the blockwise recipe", &Run::fp8,
             &Fp8Config::gradients),
      object("tiles", "",
             "tokens the long-sequence passes take at once, and on GPUs the memory of attention's blocks; 0: their "
             "rules' choice (docs/long-context.md)"),
      bound(field(&Run::tiles, &Tiles::loss_tokens),
            integer("tiles.loss_tokens", {}, 0, kIntMax, "",
                    "tokens of logits the head makes at once; 0: at most 512 MiB of logits")),
      bound(field(&Run::tiles, &Tiles::mlp_tokens),
            integer("tiles.mlp_tokens", {}, 0, kIntMax, "",
                    "tokens a Llama block's MLP runs at once; 0: whole up to 1 GiB of intermediates")),
      bound(bytes(&Run::tiles, &Tiles::attention_block_bytes),
            of_shape("tiles.attention_block_bytes", {}, "a size or a byte count", "",
                     "on GPUs, the memory a block of the deterministic attention backward takes for its scores' "
                     "gradient, e.g. \"8GiB\"; 0: 8 GiB where the plan fits the device with it, else 4 GiB")),
      writes(bytes(&Run::device_memory_bytes),
             absent(of_shape("device_memory", Json(), "a size or a byte count", "",
                             "the per-device budget, e.g. \"512MiB\": exceeding it is an error naming the tensor"),
                    "none")),
      writes(bytes(&Run::host_memory_bytes),
             absent(of_shape("host_memory", Json(), "a size or a byte count", "",
                             "a node's host memory for its ranks' offloaded state and host checkpoints, e.g. "
                             "\"120GiB\""),
                    "what the node has free")),
  };
}

// The layout: each key written to spec::ParallelConfig as given (no default is written back), the layout
// (layout::resolve_parallel) deriving what is absent. "parallel": "auto" and DeepSpeed's
// activation_checkpointing.cpu_checkpointing are read by parse().
std::vector<Setting> parallel_rows() {
  using spec::ParallelConfig, spec::ScheduleKind;
  const ParallelConfig par{};  // the defaults layout::resolve_parallel applies
  const auto at = [](auto member) { return field(&Run::parallel, member); };
  const auto given = [](auto member) { return maybe(&Run::parallel, member); };
  Names<ScheduleKind> schedules;
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved})
    schedules.emplace_back(k, spec::schedule_name(k));
  Names<spec::ContextAttention> attentions;
  for (spec::ContextAttention a :
       {spec::ContextAttention::Auto, spec::ContextAttention::Heads, spec::ContextAttention::Ring})
    attentions.emplace_back(a, spec::context_attention_name(a));
  const Field stages = {[](const Run& r) { return Json(r.parallel.stages); },
                        [](Run& r, const Json& j) {
                          r.parallel.stages.clear();
                          for (const Json& range : j)  // [first, last], checked by schema.cc
                            r.parallel.stages.emplace_back(as_integer(range.at(0)).value_or(0),
                                                           as_integer(range.at(1)).value_or(0));
                        }};
  const std::string derived = "derived from the world size";
  return {
      object("parallel", "", "the layout: an object, or \"auto\" for the planner's fastest that fits"),
      writes(
          given(&ParallelConfig::virtual_gpus),
          absent(integer("parallel.virtual_gpus", Json(), 1, kIntMax, "", "dp: the data-parallel replicas"), derived)),
      writes(given(&ParallelConfig::pipeline),
             absent(integer("parallel.pipeline", Json(), 1, kIntMax, "", "pp: pipeline stages of a virtual GPU"),
                    derived)),
      writes(given(&ParallelConfig::tensor),
             absent(integer("parallel.tensor", Json(), 1, kIntMax, "", "tp: tensor-parallel slots of a stage"), "1")),
      writes(given(&ParallelConfig::context),
             absent(integer("parallel.context", Json(), 1, kIntMax, "sequence_parallel_size",
                            "cp: devices each sequence is split over (docs/long-context.md)"),
                    "1")),
      writes(named(attentions, &Run::parallel, &ParallelConfig::context_attention),
             absent(choice("parallel.context_attention", Json(), spec::context_attention_names(), "",
                           "how attention runs over the context shards: heads (all-to-all by heads), ring (key/value "
                           "blocks passed around the shards), or auto: heads where the heads split, ring otherwise"),
                    spec::context_attention_name(par.context_attention))),
      writes(given(&ParallelConfig::expert),
             absent(integer("parallel.expert", Json(), 1, kIntMax, "expert_parallel.autoep_size",
                            "ep: ranks of one ZeRO group each mixture-of-experts layer's experts are spread over"),
                    "1")),
      writes(named(schedules, &Run::parallel, &ParallelConfig::schedule),
             absent(choice("parallel.schedule", Json(), spec::schedule_names(), "",
                           "the pipeline schedule: gpipe, 1f1b or interleaved"),
                    spec::schedule_name(par.schedule))),
      writes(given(&ParallelConfig::virtual_stages),
             absent(integer("parallel.virtual_stages", Json(), 1, kIntMax, "", "interleaved: stages per device"), "1")),
      writes(at(&ParallelConfig::activation_checkpointing),
             absent(boolean("parallel.activation_checkpointing", Json(), "",
                            "recompute each block's activations in backward from its input"),
                    par.activation_checkpointing ? "true" : "false")),
      writes(stages, absent(shaped("parallel.stages", SettingType::Ranges, Json(), "",
                                   "an explicit stage map: [[first, last], ...], the blocks of each stage"),
                            "balanced over the stages")),
      writes(given(&ParallelConfig::timeout_s),
             absent(number("parallel.timeout_s", Json(), 0.0, kInf, true, "",
                           "seconds a collective may wait before the watchdog stops the job"),
                    number_text(ParallelConfig::kDefaultTimeoutS))),
      writes(at(&ParallelConfig::cpu_checkpointing),
             absent(boolean("parallel.cpu_checkpointing", Json(), "activation_checkpointing.cpu_checkpointing",
                            "the checkpointed layer inputs wait in host memory (needs activation_checkpointing)"),
                    par.cpu_checkpointing ? "true" : "false")),
      writes(given(&ParallelConfig::cpu_checkpointing_layers),
             absent(integer("parallel.cpu_checkpointing_layers", Json(), 0, kIntMax, "",
                            "with cpu_checkpointing: how many of each pipeline chunk's first layers send their inputs "
                            "to host memory, the rest keeping theirs on the device"),
                    "every layer's but the chunk's last")),
      writes(at(&ParallelConfig::keep_attention),
             absent(boolean("parallel.keep_attention", Json(), "",
                            "each block keeps attention's output for the recomputation, which then skips attention "
                            "(needs activation_checkpointing)"),
                    par.keep_attention ? "true" : "false")),
      absent(integer("sequence_parallel_size", Json(), 1, kIntMax, "=",
                     "Ulysses sequence parallelism: Tandem's parallel.context, each sequence split over "
                     "that many devices"),
             "parallel.context"),
  };
}

}  // namespace tandem::config::rows
