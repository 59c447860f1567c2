// Internal to tandem_config: typed, range-checked access to one JSON object of the config, with defaults
// written back and "did you mean" suggestions for unknown keys. The schema itself lives in the settings table
// (settings.h) and schema.cc.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tandem/config/config.h"

namespace tandem::config {

// Levenshtein distance, used to suggest the valid key nearest to a misspelt one.
size_t edit_distance(const std::string& a, const std::string& b);

// The JSON value as a user wrote it, for messages: strings quoted, numbers as written.
std::string show(const Json& value);

class Fields {
 public:
  // `obj` must be an object (throws otherwise); `path` is its dotted path ("" for the top level).
  Fields(Json& obj, std::string path);

  // Throws for the first key not in `allowed` or `deepspeed`, naming its full path and the nearest of both.
  // `elsewhere` lists keys valid in another variant of this object (e.g. the other model type) so the
  // message can say why they are not accepted here; `variant` names the variant in use ("model type 'gpt'").
  // `deepspeed` lists DeepSpeed's keys accepted here (and reserved ones), which the caller checks
  // (deepspeed_keys.h); they are suggested but not listed as valid.
  void only(const std::vector<std::string>& allowed, const std::vector<std::string>& elsewhere = {},
            const std::string& variant = "", const std::vector<std::string>& deepspeed = {}) const;

  bool has(const std::string& key) const { return obj_.contains(key); }
  std::string path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& path() const { return path_; }  // "" for the top level

  // Each getter checks the type and range, writes the default back when the key is absent and `def` is
  // given, and throws "missing required key" when absent without a default.
  int64_t integer(const std::string& key, std::optional<int64_t> def, int64_t min,
                  int64_t max = std::numeric_limits<int64_t>::max());
  double number(const std::string& key, std::optional<double> def, double min,
                double max = std::numeric_limits<double>::infinity(), bool min_exclusive = false);
  bool boolean(const std::string& key, std::optional<bool> def);
  // One of `choices`, compared case-insensitively; the canonical spelling is written back and returned.
  std::string choice(const std::string& key, std::optional<std::string> def, const std::vector<std::string>& choices);
  // A non-empty string.
  std::string string(const std::string& key, std::optional<std::string> def);
  // The sub-object at `key`, created empty when absent.
  Json& object(const std::string& key);

  Json& raw(const std::string& key) { return obj_[key]; }

  [[noreturn]] void fail_type(const std::string& key, const std::string& expected) const;

 private:
  const Json* value_or_default(const std::string& key, bool has_default, const std::string& expected) const;

  Json& obj_;
  std::string path_;
};

// Reads an integer (or an integral float such as 1e6) from `value`; nullopt when it is neither.
std::optional<int64_t> as_integer(const Json& value);

// The divisor of n nearest to `near`, to suggest in a refusal.
int64_t nearest_divisor(int64_t n, int64_t near);

// The "parallel" value of `top`, when given: "auto", or an object whose keys its rows check (the stage map by its own
// rule); the layout decides defaults and how the values combine.
void validate_parallel(Fields& top);

// A "type": "llama" model object checked and completed (schema_llama.cc); its valid keys were checked already.
void validate_llama(Fields& m);

// validate() that also gives the paths of the DeepSpeed keys present that have no effect in Tandem, sorted.
Json validate(Json cfg, std::vector<std::string>& no_effect);

}  // namespace tandem::config
