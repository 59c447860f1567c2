// The settings table (settings.h): every row of Tandem's schema with its default taken from the spec struct that holds
// it, read_setting (a row applied to one key of a config object) and the docs' key list made from the rows.
#include "tandem/config/settings.h"

#include <map>
#include <sstream>

#include "tandem/config/fields.h"
#include "tandem/core/error.h"
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
// What the docs say of a key without a default.
Setting absent(Setting s, std::string what) {
  s.absent = std::move(what);
  return s;
}

std::string number_text(double v) {
  if (v == kInf) return "inf";
  std::ostringstream os;
  os << v;
  return os.str();
}

// The offload objects' rows: `key` is "offload_optimizer" or "offload_param".
std::vector<Setting> offload_rows(const std::string& key, const std::string& doc) {
  const spec::OffloadConfig d{};  // the defaults' one place
  const std::string p = "zero_optimization." + key + ".";
  std::vector<Setting> rows = {
      object("zero_optimization." + key, "=", doc),
      choice(p + "device", "none", {"none", "cpu", "nvme"}, "=", "\"none\", \"cpu\" or \"nvme\""),
      string(p + "nvme_path", "=", "with \"nvme\": the folder each rank's swap file goes in"),
      boolean(p + "pin_memory", d.pin_memory, "=", "page-locked host buffers (asynchronous copies to a GPU)"),
      integer(p + "buffer_count", d.buffer_count, 1, 1024, "=", "with \"nvme\": host buffers the swap cycles through"),
  };
  if (key != "offload_optimizer") return rows;
  rows.push_back(number(p + "ratio", d.ratio, 0.0, 1.0, true, "=",
                        "the share of the optimizer state offloaded, by parameters in layer order; the rest stays on "
                        "the device"));
  rows.push_back(choice(p + "update", d.update == spec::OffloadUpdate::AfterBackward ? "after_backward" : "in_backward",
                        {"in_backward", "after_backward"}, "",
                        "when the host updates an offloaded layer: as its gradients arrive in backward, or after the "
                        "whole backward (docs/offload.md)"));
  rows.push_back(integer(p + "upload_piece", d.upload_piece, 1, kIntMax, "",
                         "bytes of updated weights uploaded to the device at once (docs/offload.md)"));
  return rows;
}

std::vector<Setting> build_settings() {
  const TrainConfig run{};              // steps, seed, steps_per_print, gradient_clipping, zero_stage, bf16
  const spec::OptimizerConfig opt{};    // optimizer.*
  const spec::SchedulerConfig sched{};  // scheduler.params.*
  const spec::Fp16Config fp16{};        // fp16.*
  const spec::CheckpointConfig ckpt{};  // checkpoint.*
  const spec::ParallelConfig par{};     // parallel.*
  std::vector<Setting> rows = {
      integer("steps", run.steps, 1, kIntMax, "", "optimizer steps of the run"),
      integer("seed", run.seed, 0, kIntMax, "", "the seed of the weights and the data"),
      integer("steps_per_print", run.steps_per_print, 1, kIntMax, "=", "a progress line every N steps"),
      // Optimizer
      object("optimizer", "=", "the optimizer object"),
      choice("optimizer.type", opt.type == spec::OptimizerType::Adam ? "Adam" : "AdamW", {"AdamW", "Adam"}, "=",
             "\"Adam\" or \"AdamW\"; DeepSpeed's other optimizers are refused by name"),
      object("optimizer.params", "=", "the optimizer's parameters"),
      number("optimizer.params.lr", opt.lr, 0.0, kInf, false, "=",
             "the learning rate (the schedule's peak when no warmup_max_lr is given)"),
      shaped("optimizer.params.betas", SettingType::NumberPair, Json::array({opt.beta1, opt.beta2}), "=",
             "Adam's [beta1, beta2]"),
      number("optimizer.params.eps", opt.eps, 0.0, kInf, true, "=", "Adam's epsilon"),
      number("optimizer.params.weight_decay", opt.weight_decay, 0.0, kInf, false, "=",
             "applied to matrices and embeddings, not to biases or norm gains, for Adam and AdamW alike"),
      boolean("optimizer.params.adam_w_mode", opt.adam_w_mode, "=",
              "true (the default): decoupled decay (AdamW); false: L2, the decay added to the gradient; refused with "
              "type AdamW"),
      number("gradient_clipping", run.gradient_clipping, 0.0, kInf, false, "=",
             "global-norm clipping threshold; 0 = off"),
      // Scheduler
      object("scheduler", "=", "the learning-rate schedule"),
      choice("scheduler.type", "Constant", {"Constant", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}, "=",
             "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\" (and Tandem's \"Constant\"); OneCycle and "
             "LRRangeTest are refused by name"),
      object("scheduler.params", "=", "the schedule's parameters"),
      number("scheduler.params.warmup_min_lr", sched.warmup_min_lr, 0.0, kInf, false, "=",
             "WarmupLR, WarmupDecayLR: the rate at step 0"),
      absent(number("scheduler.params.warmup_max_lr", Json(), 0.0, kInf, false, "=",
                    "WarmupLR, WarmupDecayLR: the peak; when absent, optimizer.params.lr"),
             "optimizer.params.lr"),
      // DeepSpeed's default, where spec::SchedulerConfig's 0 is the Constant schedule's (no warmup).
      integer("scheduler.params.warmup_num_steps", 1000, 0, kIntMax, "=",
              "the warmup's length in steps (DeepSpeed's default 1000)"),
      choice("scheduler.params.warmup_type", sched.warmup_type == spec::WarmupType::Linear ? "linear" : "log",
             {"log", "linear"}, "=", "\"log\" (DeepSpeed's default) or \"linear\""),
      absent(integer("scheduler.params.total_num_steps", Json(), 1, kIntMax, "=",
                     "WarmupDecayLR, WarmupCosineLR: where the decay ends; default steps"),
             "steps"),
      number("scheduler.params.warmup_min_ratio", sched.warmup_min_ratio, 0.0, 1.0, false, "=",
             "WarmupCosineLR: the warmup's start as a fraction of the peak"),
      number("scheduler.params.cos_min_ratio", sched.cos_min_ratio, 0.0, 1.0, false, "=",
             "WarmupCosineLR: the floor as a fraction of the peak"),
      // FP16, BF16
      object("fp16", "=", "16-bit compute in f16 with fp32 master weights, moments and gradient reduction"),
      boolean("fp16.enabled", fp16.enabled, "=", "compute in f16"),
      number("fp16.loss_scale", fp16.loss_scale, 0.0, kInf, false, "=",
             "0: dynamic loss scaling, otherwise a static scale"),
      // 2^127 would overflow fp32.
      integer("fp16.initial_scale_power", fp16.initial_scale_power, 0, 126, "=",
              "the dynamic scale starts at 2^initial_scale_power"),
      integer("fp16.loss_scale_window", fp16.loss_scale_window, 1, kIntMax, "=",
              "good steps before the dynamic scale doubles"),
      integer("fp16.hysteresis", fp16.hysteresis, 1, kIntMax, "=",
              "overflows tolerated before the scale halves (see docs/deepspeed.md)"),
      number("fp16.min_loss_scale", fp16.min_loss_scale, 0.0, kInf, true, "=", "the dynamic scale's floor"),
      object("bf16", "=", "16-bit compute in bf16 with fp32 master weights, moments and gradient reduction"),
      boolean("bf16.enabled", run.bf16, "=", "compute in bf16"),
      // ZeRO
      object("zero_optimization", "=", "ZeRO across the data-parallel replicas"),
      integer("zero_optimization.stage", run.zero_stage, 0, 3, "=",
              "0-3: 1 shards the optimizer state, 2 also the gradients, 3 also the weights"),
  };
  for (Setting& s : offload_rows("offload_param",
                                 "ZeRO-Infinity's parameter offload (stage 3): the weights live in host memory or "
                                 "files, fetched layer by layer ahead of use (docs/offload.md)"))
    rows.push_back(std::move(s));
  for (Setting& s : offload_rows("offload_optimizer",
                                 "ZeRO-Offload: the fp32 master weights, both moments and the gradients' owned shard "
                                 "live in host memory or files, and AdamW runs on the host (docs/offload.md); Tandem's "
                                 "own update and upload_piece are accepted beside DeepSpeed's keys"))
    rows.push_back(std::move(s));
  // Parallel: only names and types here; the layout (layout::resolve_parallel) derives what is absent.
  const std::string derived = "derived from the world size";
  const std::vector<Setting> parallel = {
      object("parallel", "", "the layout: an object, or \"auto\" for the planner's fastest that fits"),
      absent(integer("parallel.virtual_gpus", Json(), 1, kIntMax, "", "dp: the data-parallel replicas"), derived),
      absent(integer("parallel.pipeline", Json(), 1, kIntMax, "", "pp: pipeline stages of a virtual GPU"), derived),
      absent(integer("parallel.tensor", Json(), 1, kIntMax, "", "tp: tensor-parallel slots of a stage"), "1"),
      absent(integer("parallel.context", Json(), 1, kIntMax, "sequence_parallel_size",
                     "cp: devices each sequence is split over (docs/long-context.md)"),
             "1"),
      absent(choice("parallel.schedule", Json(), spec::schedule_names(), "",
                    "the pipeline schedule: gpipe, 1f1b or interleaved"),
             spec::schedule_name(par.schedule)),
      absent(integer("parallel.virtual_stages", Json(), 1, kIntMax, "", "interleaved: stages per device"), "1"),
      absent(boolean("parallel.activation_checkpointing", Json(), "",
                     "recompute each block's activations in backward from its input"),
             par.activation_checkpointing ? "true" : "false"),
      absent(shaped("parallel.stages", SettingType::Ranges, Json(), "",
                    "an explicit stage map: [[first, last], ...], the blocks of each stage"),
             "balanced over the stages"),
      absent(number("parallel.timeout_s", Json(), 0.0, kInf, true, "",
                    "seconds a collective may wait before the watchdog stops the job"),
             number_text(spec::ParallelConfig::kDefaultTimeoutS)),
      absent(boolean("parallel.cpu_checkpointing", Json(), "activation_checkpointing.cpu_checkpointing",
                     "the checkpointed layer inputs wait in host memory (needs activation_checkpointing)"),
             par.cpu_checkpointing ? "true" : "false"),
  };
  for (const Setting& s : parallel) rows.push_back(s);
  const std::vector<Setting> checkpoint = {
      object("checkpoint", "=",
             "Tandem's checkpoint object (every, keep, at_end, async); DeepSpeed's keys in it are "
             "accepted"),
      integer("checkpoint.every", ckpt.every, 0, kIntMax, "", "steps between checkpoints; 0: only at the end"),
      integer("checkpoint.keep", ckpt.keep, 1, kIntMax, "", "how many checkpoints to keep, the newest"),
      boolean("checkpoint.at_end", ckpt.at_end, "", "also after the last step"),
      boolean("checkpoint.async", ckpt.async, "",
              "written in the background from host memory; false: at the step boundary, training waiting"),
  };
  for (const Setting& s : checkpoint) rows.push_back(s);
  return rows;
}

std::string type_name(const Setting& s) {
  switch (s.type) {
    case SettingType::Object:
      return "object";
    case SettingType::Ranges:
      return "list of [first, last]";
    case SettingType::Integer:
      return "integer";
    case SettingType::Number:
      return "number";
    case SettingType::Boolean:
      return "boolean";
    case SettingType::Choice:
      return "one of";
    case SettingType::String:
      return "string";
    case SettingType::NumberPair:
      return "pair of numbers";
  }
  return "";
}

std::string check_text(const Setting& s) {
  std::ostringstream os;
  if (s.type == SettingType::Integer && s.max_int == kIntMax) os << ">= " << s.min_int;
  if (s.type == SettingType::Integer && s.max_int != kIntMax) os << s.min_int << " to " << s.max_int;
  if (s.type == SettingType::Number && s.max == kInf) os << (s.min_exclusive ? "> " : ">= ") << number_text(s.min);
  if (s.type == SettingType::Number && s.max != kInf)
    os << (s.min_exclusive ? "(" : "[") << number_text(s.min) << ", " << number_text(s.max) << "]";
  if (s.type == SettingType::NumberPair) os << "each in [0, 1)";
  for (size_t i = 0; s.type == SettingType::Choice && i < s.choices.size(); ++i) os << (i ? ", " : "") << s.choices[i];
  return os.str();
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> rows = build_settings();
  return rows;
}

const Setting* find_setting(const std::string& path) {
  static const std::map<std::string, const Setting*> index = [] {
    std::map<std::string, const Setting*> m;
    for (const Setting& s : settings()) m[s.path] = &s;
    return m;
  }();
  const auto it = index.find(path);
  return it == index.end() ? nullptr : it->second;
}

std::vector<std::string> setting_keys(const std::string& object) {
  std::vector<std::string> keys;
  const std::string prefix = object.empty() ? "" : object + ".";
  for (const Setting& s : settings()) {
    if (s.path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = s.path.substr(prefix.size());
    if (rest.find('.') == std::string::npos) keys.push_back(rest);
  }
  return keys;
}

Json read_setting(Fields& f, const std::string& key, const std::optional<Json>& def) {
  const Setting* s = find_setting(f.path(key));
  TANDEM_CHECK(s != nullptr, "no settings row for ", f.path(key));
  const Json& d = def ? *def : s->def;
  switch (s->type) {
    case SettingType::Integer:
      return f.integer(key, d.is_null() ? std::nullopt : std::optional<int64_t>(d.get<int64_t>()), s->min_int,
                       s->max_int);
    case SettingType::Number:
      return f.number(key, d.is_null() ? std::nullopt : std::optional<double>(d.get<double>()), s->min, s->max,
                      s->min_exclusive);
    case SettingType::Boolean:
      return f.boolean(key, d.is_null() ? std::nullopt : std::optional<bool>(d.get<bool>()));
    case SettingType::Choice:
      return f.choice(key, d.is_null() ? std::nullopt : std::optional<std::string>(d.get<std::string>()), s->choices);
    case SettingType::String:
      return f.string(key, d.is_null() ? std::nullopt : std::optional<std::string>(d.get<std::string>()));
    case SettingType::Object:
    case SettingType::NumberPair:
    case SettingType::Ranges:
      // Checked by their own rules in schema.cc; the default is written back here.
      if (!f.has(key) && !d.is_null()) f.raw(key) = d;
      return f.has(key) ? f.raw(key) : Json();
  }
  return Json();
}

std::string settings_markdown() {
  std::ostringstream os;
  os << "| key | type | default | check | DeepSpeed | meaning |\n|---|---|---|---|---|---|\n";
  for (const Setting& s : settings()) {
    os << "| `" << s.path << "` | " << type_name(s) << " | ";
    if (s.def.is_null())
      os << s.absent;
    else
      os << "`" << s.def.dump() << "`";
    os << " | " << check_text(s) << " | ";
    if (s.deepspeed == "=")
      os << "same";
    else if (!s.deepspeed.empty())
      os << "`" << s.deepspeed << "`";
    os << " | " << s.doc << " |\n";
  }
  return os.str();
}

}  // namespace tandem::config
