// One row per setting of Tandem's schema, in one place: its key path, type, default (read from the spec field its value
// goes to), check, DeepSpeed name, the line the docs give it and that field. The rows drive validate() (which keys an
// object has, their types, ranges and defaults: read_setting), parse() (write_settings puts each value in its field),
// the DeepSpeed catalogue's entries for the keys Tandem reads itself (deepspeed_keys.cc) and docs/config-keys.md
// (settings_markdown; a test keeps the file equal to it). Every key of the config has its row but the model's, whose
// keys are the Hugging Face families' own (schema.cc, schema_llama.cc). Rules that join several keys (a scheduler
// type's own keys, nvme needing nvme_path, a data type's keys) stay in schema.cc; the rows themselves are in
// settings_rows.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/spec/train_config.h"

namespace tandem::config {

class Fields;

// NumberPair (Adam's betas), Ranges (parallel.stages) and Shaped (a value of its own shape: a memory size, LoRA's
// targets) are checked by their own rules in schema.cc.
enum class SettingType { Object, Integer, Number, Boolean, Choice, String, NumberPair, Ranges, Shaped };

// Where a row's value lives in spec::TrainConfig: `read` gives the field as JSON (a default TrainConfig's is the row's
// default), `write` puts a validated value there (parse(), and parallel_config for a layout alone). The batch keys
// write their optional values (batch.cc derives the absent ones) and the layout's theirs. Empty where code reads the
// value: an object ("parallel": "auto" too), a key that joins others (LoRA's targets and initialisation), and
// DeepSpeed's names that Tandem rewrites to its own (sequence_parallel_size; activation_checkpointing's
// cpu_checkpointing, which parse() reads beside parallel.cpu_checkpointing).
struct Field {
  std::function<Json(const spec::TrainConfig&)> read;
  std::function<void(spec::TrainConfig&, const Json&)> write;
};

struct Setting {
  std::string path;  // dotted: "optimizer.params.eps"
  SettingType type = SettingType::Object;
  Json def;  // the default validate() writes back; null: none (required, or absent unless given)
  // A key of an object that may be absent ("eval", "lora") or of one variant of its object (tokens data's dtype): the
  // default written back where that object or variant is in use (def is null).
  Json when_used;
  // When def is null, what the docs say the value is when absent ("the run's steps"); empty: nothing.
  std::string absent;
  // Integer: [min_int, max_int]; Number: [min, max], min excluded when min_exclusive.
  int64_t min_int = 0, max_int = std::numeric_limits<int64_t>::max();
  double min = 0, max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  std::vector<std::string> choices;  // Choice: the values, compared case-insensitively
  std::string shape;                 // Shaped: what the value is, for the docs ("a size or a byte count")
  // DeepSpeed's name for the setting: "=" the same path, "" none (Tandem's own), otherwise DeepSpeed's path.
  std::string deepspeed;
  std::string doc;  // one line for people: the docs' key list, and the DeepSpeed catalogue's note
  Field field;      // where parse() writes the value
};

// Every row, objects before their keys, in the order of DeepSpeed's configuration page where DeepSpeed has them.
const std::vector<Setting>& settings();

// The row for `path`; null when there is none.
const Setting* find_setting(const std::string& path);

// The keys directly inside the object at `object` ("" for the top level) that have rows, in the table's order.
std::vector<std::string> setting_keys(const std::string& object);

// Checks key `key` of `f` against its row (type, range, choices) and writes the row's default back when the key is
// absent (def, else when_used); `def` replaces it where it depends on other keys (the lr, the decay's end). Returns the
// value as written back (null when absent without a default). A row without a default and an absent key: "missing
// required".
Json read_setting(Fields& f, const std::string& key, const std::optional<Json>& def = std::nullopt);

// Writes each value of the validated config `cfg` whose row has a field into `run`, for the rows at `object` and under
// it ("" for all); a key the config does not have leaves its field as it is.
void write_settings(const Json& cfg, const std::string& object, spec::TrainConfig& run);

// A number as the docs write it: "inf" for infinity, otherwise as the stream writes it ("300", "1e-08").
std::string number_text(double v);

// The key list of docs/config-keys.md: one Markdown table row per setting.
std::string settings_markdown();

}  // namespace tandem::config
