// The rows of the settings table (settings.h), in the order of DeepSpeed's configuration page where DeepSpeed has the
// key. Each row that parse() reads through the table is bound to its spec::TrainConfig field (`bound`, `writes`): the
// key's path is written here once, and its default is the field's.
#include "tandem/config/settings_row_kit.h"
#include "tandem/core/dtype.h"
#include "tandem/core/units.h"
#include "tandem/spec/schedule.h"

namespace tandem::config {
namespace {

using namespace rows;  // NOLINT: the row helpers are this file's vocabulary

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
