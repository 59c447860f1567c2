// The training configuration: a DeepSpeed-like JSON file, command-line overrides, the schema check and a
// typed view. It does not interpret parallel layouts or build models; it only checks and types the keys.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/spec/train_config.h"

namespace tandem::config {

using Json = nlohmann::json;

// The plain values parse() produces are spec's (spec/train_config.h, spec/train.h, spec/model_config.h,
// spec/models.h); config's own code names them unqualified, every other module as spec::.
using spec::BatchConfig;
using spec::BatchSizes;
using spec::CheckpointConfig;
using spec::DataConfig;
using spec::DataType;
using spec::EvalConfig;
using spec::Fp16Config;
using spec::GptConfig;
using spec::LlamaConfig;
using spec::MlpConfig;
using spec::model_type;
using spec::ModelConfig;
using spec::ModelIO;
using spec::MonitorConfig;
using spec::OffloadConfig;
using spec::OffloadDevice;
using spec::OffloadUpdate;
using spec::OptimizerConfig;
using spec::OptimizerType;
using spec::ParallelConfig;
using spec::RopeScaling;
using spec::RopeType;
using spec::SchedulerConfig;
using spec::SchedulerType;
using spec::WarmupType;

// DeepSpeed's rule train_batch_size = micro * accum * dp; one or two of the three may be omitted and are
// derived. Throws when none is given or when the given ones cannot satisfy the rule.
BatchSizes resolve_batch(const BatchConfig& given, int64_t dp);

// The samples per step the keys ask for, whatever the data-parallel size: train_batch_size, else micro x
// accumulation.
int64_t global_batch(const BatchConfig& given);

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

// Checks every key against the schema (an unknown key names its dotted path and the nearest valid key, of
// Tandem's and DeepSpeed's), checks types and ranges and returns the config with every default filled in.
// DeepSpeed keys Tandem does not act on are accepted or refused as docs/deepspeed.md says; "auto" values are
// resolved where the Hugging Face Trainer fills them (and recorded under "auto_resolved").
Json validate(Json cfg);

// resolve_batch (above) on the batch keys of `cfg`, whose types it checks.
BatchSizes resolve_batch(const Json& cfg, int64_t dp);

// spec's TrainConfig as parse() makes it, with the validated config's JSON beside the typed values: saved next to
// checkpoints, and read for the lines to print once. What needs only the values takes spec::TrainConfig.
struct TrainConfig : spec::TrainConfig {
  Json raw;                                 // the whole validated config, for saving next to checkpoints
  std::vector<std::string> auto_resolved;   // keys whose "auto" validate() resolved (docs/deepspeed.md)
  std::vector<std::string> no_effect_keys;  // DeepSpeed keys present that change nothing in Tandem, sorted
  // Lines to print once before training ("auto" values, keys of no effect, an unused lr), made by set_data_parallel
  // because what an "auto" batch key became depends on the data-parallel size.
  std::vector<std::string> notices;
  // Warnings about model.from_pretrained's config.json (keys of no effect), kept for `notices`.
  std::vector<std::string> pretrained_notices;
};

// The "parallel" value (absent/null, "auto" or an object) as typed values; refuses values of the wrong type with
// the same words whether or not validate() saw them first.
ParallelConfig parallel_config(const Json& parallel);

// A "model" object as validate() wrote it (a validated config's, or one a checkpoint saved) as its family's struct.
ModelConfig model_config(const Json& validated_model);

// A validated config's "lora" object (one a checkpoint saved, too) as the plain struct; without one, enabled false.
spec::LoraConfig lora_config(const Json& validated_cfg);

// A "model" object alone checked and completed as validate() does a config's (defaults written, from_pretrained
// expanded); errors name the keys as "model.<key>".
Json validate_model(Json model);

// The typed view of a config that validate() returned, read once. The batch sizes wait for the data-parallel size,
// which the layout gives (layout::resolve_parallel, or the planner for "parallel": "auto"): set_data_parallel.
TrainConfig parse(const Json& validated_cfg);
// parse() and set_data_parallel(dp) in one.
TrainConfig parse(const Json& validated_cfg, int64_t dp);

// Resolves `tc.batch` for `dp` data-parallel ranks (resolve_batch: throws when the keys cannot make it) and writes
// `tc.notices`.
void set_data_parallel(TrainConfig& tc, int64_t dp);

}  // namespace tandem::config
