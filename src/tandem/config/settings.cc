// What the settings table (settings.h; its rows are settings_rows.cc) is used for: finding a row, read_setting (a row
// applied to one key of a config object) and the docs' key list made from the rows.
#include "tandem/config/settings.h"

#include <map>
#include <sstream>

#include "tandem/config/fields.h"
#include "tandem/core/error.h"

namespace tandem::config {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

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
    case SettingType::Shaped:
      return s.shape;
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

std::string number_text(double v) {
  if (v == kInf) return "inf";
  std::ostringstream os;
  os << v;
  return os.str();
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
  const Json& d = def ? *def : s->def.is_null() ? s->when_used : s->def;
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
    case SettingType::Shaped:
      // Checked by their own rules in schema.cc; the default is written back here.
      if (!f.has(key) && !d.is_null()) f.raw(key) = d;
      return f.has(key) ? f.raw(key) : Json();
  }
  return Json();
}

void write_settings(const Json& cfg, const std::string& object, spec::TrainConfig& run) {
  const std::string prefix = object.empty() ? "" : object + ".";
  for (const Setting& s : settings()) {
    if (!s.field.write || (s.path != object && s.path.compare(0, prefix.size(), prefix) != 0)) continue;
    const Json* at = &cfg;
    for (size_t begin = 0; at != nullptr;) {
      const size_t dot = s.path.find('.', begin);
      const auto it = at->is_object() ? at->find(s.path.substr(begin, dot - begin)) : at->end();
      at = it == at->end() ? nullptr : &*it;
      if (dot == std::string::npos) break;
      begin = dot + 1;
    }
    if (at != nullptr) s.field.write(run, *at);
  }
}

std::string settings_markdown() {
  std::ostringstream os;
  os << "| key | type | default | check | DeepSpeed | meaning |\n|---|---|---|---|---|---|\n";
  for (const Setting& s : settings()) {
    os << "| `" << s.path << "` | " << type_name(s) << " | ";
    const Json& def = s.def.is_null() ? s.when_used : s.def;
    if (def.is_null())
      os << s.absent;
    else
      os << "`" << def.dump() << "`";
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
