// The training configuration: a DeepSpeed-like JSON file, command-line overrides, the schema check and a
// typed view. It does not interpret parallel layouts or build models; it only checks and types the keys.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem::config {

using Json = nlohmann::json;

// Reads the file (errors name the file, and the line and column of a JSON syntax error), applies the
// overrides in order, validates and fills defaults.
Json load_config(const std::string& path, const std::vector<std::string>& overrides);

// Parses JSON text the way config files are read: comments allowed, and a key written twice in one object
// refused naming its dotted path (JSON parsers keep the last one silently). `source` names the text in
// messages, e.g. "config file 'a.json'".
Json parse_config_text(const std::string& text, const std::string& source);

// Applies one "a.b.c=value" assignment, creating missing objects on the way. The value is read as JSON when
// it parses as JSON (numbers, true, [1,2], {"x":1}), otherwise it is taken as a string.
void apply_override(Json& cfg, const std::string& assignment);

// Checks every key against the schema (an unknown key names its dotted path and the nearest valid key),
// checks types and ranges and returns the config with every default filled in.
Json validate(Json cfg);

struct BatchSizes {
  int64_t global;  // train_batch_size
  int64_t micro;   // train_micro_batch_size_per_gpu
  int64_t accum;   // gradient_accumulation_steps
};

// DeepSpeed's rule train_batch_size = micro * accum * dp; one or two of the three may be omitted and are
// derived. Throws when none is given or when the given ones cannot satisfy the rule.
BatchSizes resolve_batch(const Json& cfg, int64_t dp);

struct OptimizerConfig {
  std::string type;  // "AdamW" or "Adam" (Adam is AdamW with weight_decay forced to 0)
  double lr;
  double beta1, beta2;
  double eps;
  double weight_decay;
};

struct SchedulerConfig {
  std::string type;  // "Constant", "WarmupLR" or "WarmupCosineLR"
  int64_t warmup_num_steps;
  double warmup_min_lr;     // WarmupLR
  int64_t total_num_steps;  // WarmupCosineLR
  double warmup_min_ratio;  // WarmupCosineLR
  double cos_min_ratio;     // WarmupCosineLR
};

struct Fp16Config {
  bool enabled;
  double loss_scale;  // 0 = dynamic
  int64_t initial_scale_power;
  int64_t loss_scale_window;
  int64_t hysteresis;
  double min_loss_scale;
};

struct CheckpointConfig {
  int64_t every;  // steps between checkpoints; 0 = only at the end
  int64_t keep;   // how many to keep
  bool at_end;    // also after the last step (benchmarks of large models turn it off)
};

struct TrainConfig {
  BatchSizes batch;
  int64_t data_parallel;
  int64_t steps;
  uint64_t seed;
  int64_t steps_per_print;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  double gradient_clipping;  // 0 = off
  int64_t zero_stage;
  Fp16Config fp16;
  bool bf16;
  std::string model_type;  // "mlp" or "gpt"
  Json model;              // the validated "model" object
  Json data;               // the validated "data" object
  Json parallel;           // null when absent, "auto", or the validated object
  CheckpointConfig checkpoint;
  uint64_t device_memory_bytes;  // 0 = no budget
  Json raw;                      // the whole validated config, for saving next to checkpoints
};

// The typed view of a config that validate() returned, with batch sizes resolved for `dp` data-parallel ranks.
TrainConfig parse(const Json& validated_cfg, int64_t dp);

}  // namespace tandem::config
