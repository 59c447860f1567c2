// Internal to tandem_config: the typed accessors and unknown-key suggestions behind schema.cc.
// What the keys are and what they default to is decided in schema.cc, not here.
#include "tandem/config/fields.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "tandem/core/error.h"

namespace tandem::config {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string show(const Json& value) { return value.dump(); }

std::optional<int64_t> as_integer(const Json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    // JSON writers (and people) write 1e6 for a million; accept any float that is exactly an integer.
    const double d = value.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

}  // namespace

Fields::Fields(Json& obj, std::string path) : obj_(obj), path_(std::move(path)) {
  if (!obj_.is_object())
    TANDEM_FAIL("config key '", path_.empty() ? std::string("(top level)") : path_,
                "' must be a JSON object {...}, got ", show(obj_));
}

void Fields::only(const std::vector<std::string>& allowed, const std::vector<std::string>& elsewhere,
                  const std::string& variant, const std::vector<std::string>& deepspeed) const {
  const auto listed = [](const std::vector<std::string>& keys, const std::string& key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  };
  for (const auto& [key, value] : obj_.items()) {
    if (listed(allowed, key) || listed(deepspeed, key)) continue;
    if (std::find(elsewhere.begin(), elsewhere.end(), key) != elsewhere.end())
      TANDEM_FAIL("unknown key '", path(key), "' for ", variant, ": only another type uses it; remove it",
                  allowed.empty() ? std::string() : " (valid keys here: " + join(allowed, ", ") + ")");
    // Case differences cost less than other edits so that "LR" finds "lr" before any two-letter key.
    const std::string* best = nullptr;
    size_t best_dist = std::numeric_limits<size_t>::max();
    for (const auto* keys : {&allowed, &deepspeed}) {
      for (const auto& candidate : *keys) {
        const size_t d = lower(key) == lower(candidate) ? 0 : edit_distance(key, candidate);
        if (d < best_dist) best_dist = d, best = &candidate;
      }
    }
    // Tandem's keys are listed; DeepSpeed's, dozens at some levels, are only pointed to.
    const std::string more = deepspeed.empty() ? "" : "; DeepSpeed's keys here are listed in docs/deepspeed.md";
    const size_t near_enough = std::max<size_t>(2, key.size() / 2);
    if (best && best_dist <= near_enough)
      TANDEM_FAIL("unknown key '", path(key), "': did you mean '", path(*best),
                  "'? (valid keys here: ", allowed.empty() ? join(deepspeed, ", ") : join(allowed, ", "), more, ")");
    if (allowed.empty() && deepspeed.empty())
      TANDEM_FAIL("unknown key '", path(key), "': '", path_, "' takes no keys", variant.empty() ? "" : " for ", variant,
                  "; remove it");
    TANDEM_FAIL("unknown key '", path(key), "': valid keys", path_.empty() ? "" : " in '" + path_ + "'", " are ",
                allowed.empty() ? join(deepspeed, ", ") : join(allowed, ", "), more);
  }
}

void Fields::fail_type(const std::string& key, const std::string& expected) const {
  TANDEM_FAIL("config key '", path(key), "' must be ", expected, ", got ", show(obj_.at(key)));
}

const Json* Fields::value_or_default(const std::string& key, bool has_default, const std::string& expected) const {
  auto it = obj_.find(key);
  if (it != obj_.end()) return &*it;
  if (!has_default) TANDEM_FAIL("missing required config key '", path(key), "' (", expected, ")");
  return nullptr;
}

int64_t Fields::integer(const std::string& key, std::optional<int64_t> def, int64_t min, int64_t max) {
  std::string expected = "an integer";
  if (max == std::numeric_limits<int64_t>::max()) {
    if (min == 1)
      expected = "a positive integer";
    else if (min == 0)
      expected = "an integer >= 0";
    else if (min != std::numeric_limits<int64_t>::min())
      expected = "an integer >= " + std::to_string(min);
  } else {
    expected = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  }
  const Json* v = value_or_default(key, def.has_value(), expected);
  if (!v) {
    obj_[key] = *def;
    return *def;
  }
  const std::optional<int64_t> i = as_integer(*v);
  if (!i || *i < min || *i > max) fail_type(key, expected);
  obj_[key] = *i;
  return *i;
}

double Fields::number(const std::string& key, std::optional<double> def, double min, double max, bool min_exclusive) {
  std::string expected = "a number";
  std::ostringstream range;
  if (std::isfinite(max))
    range << " from " << min << " to " << max;
  else if (min_exclusive)
    range << " > " << min;
  else if (std::isfinite(min))
    range << " >= " << min;
  expected += range.str();
  const Json* v = value_or_default(key, def.has_value(), expected);
  if (!v) {
    obj_[key] = *def;
    return *def;
  }
  if (!v->is_number()) fail_type(key, expected);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max || (min_exclusive && d == min)) fail_type(key, expected);
  return d;
}

bool Fields::boolean(const std::string& key, std::optional<bool> def) {
  const Json* v = value_or_default(key, def.has_value(), "true or false");
  if (!v) {
    obj_[key] = *def;
    return *def;
  }
  if (!v->is_boolean()) fail_type(key, "true or false");
  return v->get<bool>();
}

std::string Fields::choice(const std::string& key, std::optional<std::string> def,
                           const std::vector<std::string>& choices) {
  const std::string expected = "one of \"" + join(choices, "\", \"") + "\"";
  const Json* v = value_or_default(key, def.has_value(), expected);
  if (!v) {
    obj_[key] = *def;
    return *def;
  }
  if (!v->is_string()) fail_type(key, expected);
  const std::string given = lower(v->get<std::string>());
  for (const auto& c : choices) {
    if (lower(c) == given) {
      obj_[key] = c;
      return c;
    }
  }
  fail_type(key, expected);
}

std::string Fields::string(const std::string& key, std::optional<std::string> def) {
  const Json* v = value_or_default(key, def.has_value(), "a non-empty string");
  if (!v) {
    obj_[key] = *def;
    return *def;
  }
  if (!v->is_string() || v->get<std::string>().empty()) fail_type(key, "a non-empty string");
  return v->get<std::string>();
}

Json& Fields::object(const std::string& key) {
  auto it = obj_.find(key);
  if (it == obj_.end()) obj_[key] = Json::object();
  Json& sub = obj_[key];
  if (!sub.is_object()) fail_type(key, "a JSON object {...}");
  return sub;
}

}  // namespace tandem::config
