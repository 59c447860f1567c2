// Internal to tandem_config: DeepSpeed's documented config keys, each with what Tandem does with it (honoured,
// no effect, or refused for now), and the check of a config's DeepSpeed keys against that catalogue.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tandem/config/config.h"

namespace tandem::config {

enum class DsCategory { kHonoured, kNoEffect, kRefused };

const char* category_name(DsCategory c);  // "honoured", "no effect", "refused"

struct DeepSpeedKey {
  std::string path;     // dotted; "a.*" stands for every key of object `a` not listed on its own
  DsCategory category;  // for every value not listed in `values`
  std::vector<std::pair<Json, DsCategory>> values;  // values judged otherwise (e.g. "none" for a device)
  std::string note;                                 // honoured: how; no effect: why it changes nothing Tandem computes
  std::string refusal;  // refused values: what Tandem does not do yet and what to do instead
  bool schema = false;  // Tandem's schema (schema.cc) reads and checks this key; listed here for the record
  bool open = false;    // an object whose contents are not looked into
};

// The whole catalogue, in the order of DeepSpeed's configuration page.
const std::vector<DeepSpeedKey>& deepspeed_keys();

// The entry for `path` (or the "parent.*" entry that covers it); null when DeepSpeed has no such key.
const DeepSpeedKey* find_deepspeed_key(const std::string& path);

// DeepSpeed's keys directly inside the object at `path` ("" for the top level) that Tandem's schema does not
// read there: Fields::only accepts them and check_deepspeed_key judges them.
std::vector<std::string> deepspeed_extras(const std::string& path);

// Judges DeepSpeed key `path` with its value: throws for what Tandem refuses (naming the key, the value and
// what to do), appends the paths of no-effect keys to `no_effect` (an object all of whose keys have no
// effect counts as one), and returns whether the key had no effect.
bool check_deepspeed_key(const std::string& path, Json& value, std::vector<std::string>& no_effect);

// Why `type` (an optimizer.type or scheduler.type value DeepSpeed knows and Tandem does not implement) is
// refused, with what to use instead; empty when it is not one of those. `key` is "optimizer.type" or
// "scheduler.type"; the comparison ignores case, as DeepSpeed's does.
std::string deepspeed_type_refusal(const std::string& key, const std::string& type);

}  // namespace tandem::config
