// The rows of the settings table (settings.h), in the order of DeepSpeed's configuration page where DeepSpeed has the
// key. Each row that parse() reads through the table is bound to its spec::TrainConfig field (`bound`, `writes`): the
// key's path is written here once, and its default is the field's.
#include "tandem/config/fields.h"
#include "tandem/config/settings.h"
#include "tandem/core/dtype.h"
#include "tandem/core/units.h"
#include "tandem/spec/schedule.h"

namespace tandem::config {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A row of `type`; the helpers below add what each type checks. A pair of numbers in [0, 1) (Adam's betas) and a list
// of [first, last] block ranges are made by this one: their checks are schema.cc's.
Setting shaped(std::string path, SettingType type, Json def, std::string ds, std::string doc) {
  Setting s;
  s.path = std::move(path);
  s.type = type;
  s.def = std::move(def);
  s.deepspeed = std::move(ds);
  s.doc = std::move(doc);
  return s;
}
Setting object(std::string path, std::string ds, std::string doc) {
  return shaped(std::move(path), SettingType::Object, Json(), std::move(ds), std::move(doc));
}
Setting integer(std::string path, Json def, int64_t min, int64_t max, std::string ds, std::string doc) {
  Setting s = shaped(std::move(path), SettingType::Integer, std::move(def), std::move(ds), std::move(doc));
  s.min_int = min, s.max_int = max;
  return s;
}
Setting number(std::string path, Json def, double min, double max, bool min_exclusive, std::string ds,
               std::string doc) {
  Setting s = shaped(std::move(path), SettingType::Number, std::move(def), std::move(ds), std::move(doc));
  s.min = min, s.max = max, s.min_exclusive = min_exclusive;
  return s;
}
Setting boolean(std::string path, Json def, std::string ds, std::string doc) {
  return shaped(std::move(path), SettingType::Boolean, std::move(def), std::move(ds), std::move(doc));
}
Setting choice(std::string path, Json def, std::vector<std::string> choices, std::string ds, std::string doc) {
  Setting s = shaped(std::move(path), SettingType::Choice, std::move(def), std::move(ds), std::move(doc));
  s.choices = std::move(choices);
  return s;
}
Setting string(std::string path, std::string ds, std::string doc) {
  return shaped(std::move(path), SettingType::String, Json(), std::move(ds), std::move(doc));
}
// A value of its own shape (`shape` says it for the docs), checked by its rule in schema.cc.
Setting of_shape(std::string path, Json def, std::string shape, std::string ds, std::string doc) {
  Setting s = shaped(std::move(path), SettingType::Shaped, std::move(def), std::move(ds), std::move(doc));
  s.shape = std::move(shape);
  return s;
}
// What the docs say of a key without a default.
Setting absent(Setting s, std::string what) {
  s.absent = std::move(what);
  return s;
}
// A key whose default applies only where its object or variant is in use: the row's default moves to when_used.
Setting when_used(Setting s) {
  s.when_used = std::move(s.def);
  s.def = Json();
  return s;
}

using Run = spec::TrainConfig;

// The member reached from `r` through the member pointers `m`, in order.
template <class R, class M>
decltype(auto) member_of(R& r, M m) {
  return (r.*m);
}
template <class R, class M, class... Rest>
decltype(auto) member_of(R& r, M m, Rest... rest) {
  return member_of(r.*m, rest...);
}

// The field reached from spec::TrainConfig through the members `m`, in order: (&Run::fp16,
// &spec::Fp16Config::hysteresis).
template <class... M>
Field field(M... m) {
  return {[=](const Run& r) { return Json(member_of(r, m...)); },
          [=](Run& r, const Json& j) {
            auto& value = member_of(r, m...);
            value = j.get<std::decay_t<decltype(value)>>();
          }};
}

// An enum's spellings in the config, in the order messages list them.
template <class E>
using Names = std::vector<std::pair<E, std::string>>;

template <class E>
Names<E> names_of(std::initializer_list<E> all, const char* (*name)(E)) {
  Names<E> out;
  for (E e : all) out.emplace_back(e, name(e));
  return out;
}

// An enum field, spelt in the config by `names` (validate() wrote the canonical spelling).
template <class E, class... M>
Field named(Names<E> names, M... m) {
  const auto read = [=](const Run& r) {
    for (const auto& [e, n] : names)
      if (e == member_of(r, m...)) return Json(n);
    return Json();
  };
  const auto write = [=](Run& r, const Json& j) {
    for (const auto& [e, n] : names)
      if (j == n) member_of(r, m...) = e;
  };
  return {read, write};
}

// Row `s` bound to its field: parse() writes the key's value there, and the row's default is the field's in a default
// spec::TrainConfig, the defaults' one place.
Setting bound(Field f, Setting s) {
  s.def = f.read(Run{});
  s.field = std::move(f);
  return s;
}
// Row `s` bound to its field for parse() only: a key with no default of its own, or DeepSpeed's (warmup_num_steps).
Setting writes(Field f, Setting s) {
  s.field = std::move(f);
  return s;
}

// An optional field: a key without a default of its own, its field empty unless the key is given.
template <class... M>
Field maybe(M... m) {
  return {[=](const Run& r) {
            const auto& value = member_of(r, m...);
            return value ? Json(*value) : Json();
          },
          [=](Run& r, const Json& j) {
            auto& value = member_of(r, m...);
            value = j.get<typename std::decay_t<decltype(value)>::value_type>();
          }};
}

// A Choice row bound to an enum field, its choices the enum's spellings.
template <class E, class... M>
Setting one_of(std::string path, const Names<E>& names, std::string ds, std::string doc, M... m) {
  std::vector<std::string> choices;
  for (const auto& [e, n] : names) choices.push_back(n);
  return bound(named(names, m...), choice(std::move(path), Json(), std::move(choices), std::move(ds), std::move(doc)));
}

void append(std::vector<Setting>& rows, std::vector<Setting> more) {
  for (Setting& s : more) rows.push_back(std::move(s));
}

// The batch keys: none has a default; each is written to spec::BatchConfig as given, and batch.cc derives the absent
// ones from the others.
std::vector<Setting> batch_rows() {
  using spec::BatchConfig;
  const auto given = [](auto member) { return maybe(&Run::batch_config, member); };
  const std::string derived = "derived from the other two";
  return {
      writes(given(&BatchConfig::global),
             absent(integer("train_batch_size", Json(), 1, kIntMax, "=",
                            "the global batch: train_batch_size = micro x accumulation x data-parallel"),
                    derived)),
      writes(given(&BatchConfig::micro),
             absent(integer("train_micro_batch_size_per_gpu", Json(), 1, kIntMax, "=",
                            "the batch of one data-parallel replica (a virtual GPU, which may span several devices) "
                            "per micro-step"),
                    derived)),
      writes(given(&BatchConfig::accum), absent(integer("gradient_accumulation_steps", Json(), 1, kIntMax, "=",
                                                        "micro-batches per step; in a pipeline, its micro-batches"),
                                                derived)),
  };
}

std::vector<Setting> optimizer_rows() {
  using spec::OptimizerConfig, spec::SchedulerConfig, spec::OptimizerType, spec::SchedulerType, spec::WarmupType;
  const auto opt = [](auto member) { return field(&Run::optimizer, member); };
  const auto sched = [](auto member) { return field(&Run::scheduler, member); };
  const Field betas = {[](const Run& r) {
                         return Json::array({r.optimizer.beta1, r.optimizer.beta2});
                       },
                       [](Run& r, const Json& j) {
                         r.optimizer.beta1 = j.at(0).get<double>(), r.optimizer.beta2 = j.at(1).get<double>();
                       }};
  return {
      object("optimizer", "=", "the optimizer object"),
      one_of("optimizer.type", Names<OptimizerType>{{OptimizerType::AdamW, "AdamW"}, {OptimizerType::Adam, "Adam"}},
             "=", "\"Adam\" or \"AdamW\"; DeepSpeed's other optimizers are refused by name", &Run::optimizer,
             &OptimizerConfig::type),
      object("optimizer.params", "=", "the optimizer's parameters"),
      bound(opt(&OptimizerConfig::lr),
            number("optimizer.params.lr", {}, 0.0, kInf, false, "=",
                   "the learning rate (the schedule's peak when no warmup_max_lr is given)")),
      bound(betas, shaped("optimizer.params.betas", SettingType::NumberPair, {}, "=", "Adam's [beta1, beta2]")),
      bound(opt(&OptimizerConfig::eps), number("optimizer.params.eps", {}, 0.0, kInf, true, "=", "Adam's epsilon")),
      bound(opt(&OptimizerConfig::weight_decay),
            number("optimizer.params.weight_decay", {}, 0.0, kInf, false, "=",
                   "applied to matrices and embeddings, not to biases or norm gains, for Adam and AdamW alike")),
      bound(opt(&OptimizerConfig::adam_w_mode),
            boolean("optimizer.params.adam_w_mode", {}, "=",
                    "true (the default): decoupled decay (AdamW); false: L2, the decay added to the gradient; refused "
                    "with type AdamW")),
      bound(field(&Run::gradient_clipping),
            number("gradient_clipping", {}, 0.0, kInf, false, "=", "global-norm clipping threshold; 0 = off")),
      // Scheduler
      object("scheduler", "=", "the learning-rate schedule"),
      one_of("scheduler.type",
             Names<SchedulerType>{{SchedulerType::Constant, "Constant"},
                                  {SchedulerType::WarmupLR, "WarmupLR"},
                                  {SchedulerType::WarmupDecayLR, "WarmupDecayLR"},
                                  {SchedulerType::WarmupCosineLR, "WarmupCosineLR"}},
             "=",
             "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\" (and Tandem's \"Constant\"); OneCycle and "
             "LRRangeTest are refused by name",
             &Run::scheduler, &SchedulerConfig::type),
      object("scheduler.params", "=", "the schedule's parameters"),
      bound(sched(&SchedulerConfig::warmup_min_lr), number("scheduler.params.warmup_min_lr", {}, 0.0, kInf, false, "=",
                                                           "WarmupLR, WarmupDecayLR: the rate at step 0")),
      // Absent, the peak is the optimizer's lr (parse()).
      writes(sched(&SchedulerConfig::peak_lr),
             absent(number("scheduler.params.warmup_max_lr", Json(), 0.0, kInf, false, "=",
                           "WarmupLR, WarmupDecayLR: the peak; when absent, optimizer.params.lr"),
                    "optimizer.params.lr")),
      // DeepSpeed's default, where spec::SchedulerConfig's 0 is the Constant schedule's (no warmup).
      writes(sched(&SchedulerConfig::warmup_num_steps),
             integer("scheduler.params.warmup_num_steps", 1000, 0, kIntMax, "=",
                     "the warmup's length in steps (DeepSpeed's default 1000)")),
      one_of("scheduler.params.warmup_type",
             Names<WarmupType>{{WarmupType::Log, "log"}, {WarmupType::Linear, "linear"}}, "=",
             "\"log\" (DeepSpeed's default) or \"linear\"", &Run::scheduler, &SchedulerConfig::warmup_type),
      // Absent, the run's steps (parse()).
      writes(sched(&SchedulerConfig::total_num_steps),
             absent(integer("scheduler.params.total_num_steps", Json(), 1, kIntMax, "=",
                            "WarmupDecayLR, WarmupCosineLR: where the decay ends; default steps"),
                    "steps")),
      bound(sched(&SchedulerConfig::warmup_min_ratio),
            number("scheduler.params.warmup_min_ratio", {}, 0.0, 1.0, false, "=",
                   "WarmupCosineLR: the warmup's start as a fraction of the peak")),
      bound(sched(&SchedulerConfig::cos_min_ratio), number("scheduler.params.cos_min_ratio", {}, 0.0, 1.0, false, "=",
                                                           "WarmupCosineLR: the floor as a fraction of the peak")),
  };
}

std::vector<Setting> precision_rows() {
  using spec::Fp16Config;
  const auto fp16 = [](auto member) { return field(&Run::fp16, member); };
  return {
      object("fp16", "=", "16-bit compute in f16 with fp32 master weights, moments and gradient reduction"),
      bound(fp16(&Fp16Config::enabled), boolean("fp16.enabled", {}, "=", "compute in f16")),
      bound(fp16(&Fp16Config::loss_scale),
            number("fp16.loss_scale", {}, 0.0, kInf, false, "=", "0: dynamic loss scaling, otherwise a static scale")),
      // 2^127 would overflow fp32.
      bound(fp16(&Fp16Config::initial_scale_power),
            integer("fp16.initial_scale_power", {}, 0, 126, "=", "the dynamic scale starts at 2^initial_scale_power")),
      bound(fp16(&Fp16Config::loss_scale_window),
            integer("fp16.loss_scale_window", {}, 1, kIntMax, "=", "good steps before the dynamic scale doubles")),
      bound(fp16(&Fp16Config::hysteresis),
            integer("fp16.hysteresis", {}, 1, kIntMax, "=",
                    "overflows tolerated before the scale halves (see docs/deepspeed.md)")),
      bound(fp16(&Fp16Config::min_loss_scale),
            number("fp16.min_loss_scale", {}, 0.0, kInf, true, "=", "the dynamic scale's floor")),
      object("bf16", "=", "16-bit compute in bf16 with fp32 master weights, moments and gradient reduction"),
      bound(field(&Run::bf16), boolean("bf16.enabled", {}, "=", "compute in bf16")),
  };
}

// The offload objects' rows: `key` is "offload_optimizer" or "offload_param", `which` its field.
std::vector<Setting> offload_rows(const std::string& key, spec::OffloadConfig Run::*which, const std::string& doc) {
  using spec::OffloadConfig, spec::OffloadDevice, spec::OffloadUpdate;
  const auto at = [which](auto member) { return field(which, member); };
  const std::string p = "zero_optimization." + key + ".";
  std::vector<Setting> rows = {
      object("zero_optimization." + key, "=", doc),
      one_of(p + "device",
             names_of({OffloadDevice::None, OffloadDevice::Cpu, OffloadDevice::Nvme}, spec::offload_device_name), "=",
             "\"none\", \"cpu\" or \"nvme\"", which, &OffloadConfig::device),
      writes(at(&OffloadConfig::nvme_path),
             string(p + "nvme_path", "=", "with \"nvme\": the folder each rank's swap file goes in")),
      bound(at(&OffloadConfig::pin_memory),
            boolean(p + "pin_memory", {}, "=", "page-locked host buffers (asynchronous copies to a GPU)")),
      bound(at(&OffloadConfig::buffer_count),
            integer(p + "buffer_count", {}, 1, 1024, "=", "with \"nvme\": host buffers the swap cycles through")),
  };
  if (key != "offload_optimizer") return rows;
  rows.push_back(bound(at(&OffloadConfig::ratio),
                       number(p + "ratio", {}, 0.0, 1.0, true, "=",
                              "the share of the optimizer state offloaded, by parameters in layer order; the rest "
                              "stays on the device")));
  rows.push_back(one_of(p + "update",
                        Names<OffloadUpdate>{{OffloadUpdate::InBackward, "in_backward"},
                                             {OffloadUpdate::AfterBackward, "after_backward"}},
                        "",
                        "when the host updates an offloaded layer: as its gradients arrive in backward, or after the "
                        "whole backward (docs/offload.md)",
                        which, &OffloadConfig::update));
  rows.push_back(bound(at(&OffloadConfig::upload_piece),
                       integer(p + "upload_piece", {}, 1, kIntMax, "",
                               "bytes of updated weights uploaded to the device at once (docs/offload.md)")));
  return rows;
}

std::vector<Setting> zero_rows() {
  std::vector<Setting> rows = {
      object("zero_optimization", "=", "ZeRO across the data-parallel replicas"),
      bound(field(&Run::zero_stage), integer("zero_optimization.stage", {}, 0, 3, "=",
                                             "0-3: 1 shards the optimizer state, 2 also the gradients, 3 also the "
                                             "weights")),
  };
  append(rows, offload_rows("offload_param", &Run::offload_param,
                            "ZeRO-Infinity's parameter offload (stage 3): the weights live in host memory or files, "
                            "fetched layer by layer ahead of use (docs/offload.md)"));
  append(rows, offload_rows("offload_optimizer", &Run::offload_optimizer,
                            "ZeRO-Offload: the fp32 master weights, both moments and the gradients' owned shard live "
                            "in host memory or files, and AdamW runs on the host (docs/offload.md); Tandem's own "
                            "update and upload_piece are accepted beside DeepSpeed's keys"));
  return rows;
}

// A data object, "data" or "eval.data" (`optional`: its defaults are written only where it is given), its field reached
// through `at`. Which keys a data type takes is schema.cc's rule.
template <class... M>
std::vector<Setting> data_rows(const std::string& object_path, bool optional, M... at) {
  using spec::DataConfig, spec::DataType;
  const std::string p = object_path + ".";
  const auto in_use = [&](Setting s) { return optional ? when_used(std::move(s)) : s; };
  return {
      object(
          object_path, "",
          optional ? "the held-out data, as \"data\" is written" : "where the samples come from (docs/huggingface.md)"),
      in_use(one_of(p + "type", names_of({DataType::Synthetic, DataType::Text, DataType::Tokens}, spec::data_type_name),
                    "",
                    "\"synthetic\" (a fixed random teacher's samples), \"text\" (a file's bytes as tokens, vocab 256) "
                    "or \"tokens\" (a file of token ids)",
                    at..., &DataConfig::type)),
      in_use(bound(field(at..., &DataConfig::samples),
                   integer(p + "samples", {}, 1, kIntMax, "", "synthetic: how many samples"))),
      writes(field(at..., &DataConfig::path), string(p + "path", "", "text, tokens: the file")),
      when_used(one_of(p + "dtype", Names<int>{{2, "uint16"}, {4, "uint32"}}, "", "tokens: the ids' width", at...,
                       &DataConfig::token_bytes)),
      in_use(bound(field(at..., &DataConfig::document_mask),
                   boolean(p + "document_mask", {}, "",
                           "attention kept inside each document packed into a window (docs/long-context.md)"))),
      writes(field(at..., &DataConfig::eos_token_id),
             integer(p + "eos_token_id", Json(), 0, int64_t{1} << 31, "",
                     "with document_mask: the token that ends every document (tools/prepare_data.py prints it)")),
  };
}

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
      when_used(bound(lora(&LoraConfig::use_rslora),
                      boolean("lora.use_rslora", {}, "", "scale by alpha / sqrt(r) instead of alpha / r"))),
      when_used(choice("lora.bias", "none", {"none"}, "", "the base's biases stay frozen; PEFT's \"none\" only")),
      // Read by lora_config(): true, false or "gaussian" is one of three initialisations.
      when_used(of_shape("lora.init_lora_weights", Run{}.lora.init == spec::LoraInit::Default,
                         "true, false or \"gaussian\"", "",
                         "fresh adapters as PEFT starts them: true (A kaiming-uniform, B zeros), false (both as "
                         "torch's nn.Linear) or \"gaussian\"")),
      writes(lora(&LoraConfig::from_pretrained),
             string("lora.from_pretrained", "",
                    "a PEFT adapter folder to continue: its r, lora_alpha, target_modules, use_rslora and bias")),
      absent(of_shape("lora.task_type", Json(), "\"CAUSAL_LM\"", "", "PEFT's task type: a causal language model's"),
             "\"CAUSAL_LM\""),
  };
}

// One of DeepSpeed's monitors, "tensorboard" or "csv_monitor", with its defaults (output_path "" is the run folder);
// `files` names what it writes.
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

// A memory budget: a size such as "512MiB" (core/units.h) or a byte count, checked by schema.cc.
Field bytes(uint64_t Run::*which) {
  return {[which](const Run& r) { return Json(r.*which); },
          [which](Run& r, const Json& j) {
            r.*which = j.is_string() ? parse_bytes(j.get<std::string>()) : j.get<uint64_t>();
          }};
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
             "tokens the long-sequence passes take at once; 0: their rules' choice (docs/long-context.md)"),
      bound(field(&Run::tiles, &Tiles::loss_tokens),
            integer("tiles.loss_tokens", {}, 0, kIntMax, "",
                    "tokens of logits the head makes at once; 0: at most 512 MiB of logits")),
      bound(field(&Run::tiles, &Tiles::mlp_tokens),
            integer("tiles.mlp_tokens", {}, 0, kIntMax, "",
                    "tokens a Llama block's MLP runs at once; 0: whole up to 1 GiB of intermediates")),
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

std::vector<Setting> build_settings() {
  std::vector<Setting> rows = batch_rows();
  append(rows,
         {
             bound(field(&Run::steps), integer("steps", {}, 1, kIntMax, "", "optimizer steps of the run")),
             bound(field(&Run::seed), integer("seed", {}, 0, kIntMax, "", "the seed of the weights and the data")),
             bound(field(&Run::steps_per_print),
                   integer("steps_per_print", {}, 1, kIntMax, "=", "a progress line every N steps")),
         });
  append(rows, optimizer_rows());
  append(rows, precision_rows());
  append(rows, zero_rows());
  append(rows, parallel_rows());
  // The model's keys are its family's own (schema.cc, schema_llama.cc): only the object has a row.
  rows.push_back(object("model", "",
                        "the model: {\"type\": \"mlp\", \"gpt\" or \"llama\", ...} with its family's keys, or "
                        "{\"from_pretrained\": DIR, \"seq_len\": N} (docs/huggingface.md); required"));
  append(rows, data_rows("data", false, &Run::data));
  rows.push_back(
      object("eval", "", "the loss on held-out data, no update, every N steps and after the last (val_loss)"));
  append(rows, data_rows("eval.data", true, &Run::eval, &spec::EvalConfig::data));
  append(rows, {
                   when_used(bound(
                       field(&Run::eval, &spec::EvalConfig::every),
                       integer("eval.every", {}, 0, kIntMax, "", "steps between evaluations; 0: only after the last"))),
                   when_used(bound(field(&Run::eval, &spec::EvalConfig::steps),
                                   integer("eval.steps", {}, 1, kIntMax, "",
                                           "global batches of held-out data each evaluation takes, the same ones "
                                           "each time"))),
               });
  append(rows, lora_rows());
  append(rows, run_rows());
  append(rows,
         monitor_rows("tensorboard", &Run::tensorboard,
                      "TensorBoard event files with DeepSpeed's tags (Train/Samples/train_loss, lr, loss_scale; "
                      "samples as the step) and Tandem's grad norm, val_loss, tokens/s, peak memory and a mixture of "
                      "experts' balance (per MoE layer too)",
                      "event files"));
  append(rows, monitor_rows("csv_monitor", &Run::csv_monitor,
                            "DeepSpeed's CSV files, one per tag (Train_Samples_train_loss.csv: step, train_loss), the "
                            "same values as tensorboard",
                            "CSV files"));
  using spec::CheckpointConfig;
  const auto ckpt = [](auto member) { return field(&Run::checkpoint, member); };
  append(rows,
         {
             object("checkpoint", "=",
                    "Tandem's checkpoint object (every, keep, at_end, async); DeepSpeed's keys in it are "
                    "accepted"),
             bound(ckpt(&CheckpointConfig::every),
                   integer("checkpoint.every", {}, 0, kIntMax, "", "steps between checkpoints; 0: only at the end")),
             bound(ckpt(&CheckpointConfig::keep),
                   integer("checkpoint.keep", {}, 1, kIntMax, "", "how many checkpoints to keep, the newest")),
             bound(ckpt(&CheckpointConfig::at_end), boolean("checkpoint.at_end", {}, "", "also after the last step")),
             bound(ckpt(&CheckpointConfig::async),
                   boolean("checkpoint.async", {}, "",
                           "written in the background from host memory; false: at the step boundary, training "
                           "waiting")),
         });
  return rows;
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> rows = build_settings();
  return rows;
}

}  // namespace tandem::config
