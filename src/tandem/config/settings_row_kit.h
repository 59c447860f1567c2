// The helpers that make the settings table's rows (settings.h), shared by the files that hold the rows
// (settings_rows.cc: the batch, optimizer, precision, ZeRO and data rows and the table's order; settings_rows_run.cc:
// LoRA's, the run's, the layout's and the monitors' rows). Internal to the config module.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "tandem/config/fields.h"
#include "tandem/config/settings.h"

namespace tandem::config::rows {

constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A row of `type`; the helpers below add what each type checks. A pair of numbers in [0, 1) (Adam's betas) and a list
// of [first, last] block ranges are made by this one: their checks are schema.cc's.
inline Setting shaped(std::string path, SettingType type, Json def, std::string ds, std::string doc) {
  Setting s;
  s.path = std::move(path);
  s.type = type;
  s.def = std::move(def);
  s.deepspeed = std::move(ds);
  s.doc = std::move(doc);
  return s;
}
inline Setting object(std::string path, std::string ds, std::string doc) {
  return shaped(std::move(path), SettingType::Object, Json(), std::move(ds), std::move(doc));
}
inline Setting integer(std::string path, Json def, int64_t min, int64_t max, std::string ds, std::string doc) {
  Setting s = shaped(std::move(path), SettingType::Integer, std::move(def), std::move(ds), std::move(doc));
  s.min_int = min, s.max_int = max;
  return s;
}
inline Setting number(std::string path, Json def, double min, double max, bool min_exclusive, std::string ds,
                      std::string doc) {
  Setting s = shaped(std::move(path), SettingType::Number, std::move(def), std::move(ds), std::move(doc));
  s.min = min, s.max = max, s.min_exclusive = min_exclusive;
  return s;
}
inline Setting boolean(std::string path, Json def, std::string ds, std::string doc) {
  return shaped(std::move(path), SettingType::Boolean, std::move(def), std::move(ds), std::move(doc));
}
inline Setting choice(std::string path, Json def, std::vector<std::string> choices, std::string ds, std::string doc) {
  Setting s = shaped(std::move(path), SettingType::Choice, std::move(def), std::move(ds), std::move(doc));
  s.choices = std::move(choices);
  return s;
}
inline Setting string(std::string path, std::string ds, std::string doc) {
  return shaped(std::move(path), SettingType::String, Json(), std::move(ds), std::move(doc));
}
// A value of its own shape (`shape` says it for the docs), checked by its rule in schema.cc.
inline Setting of_shape(std::string path, Json def, std::string shape, std::string ds, std::string doc) {
  Setting s = shaped(std::move(path), SettingType::Shaped, std::move(def), std::move(ds), std::move(doc));
  s.shape = std::move(shape);
  return s;
}
// What the docs say of a key without a default.
inline Setting absent(Setting s, std::string what) {
  s.absent = std::move(what);
  return s;
}
// A key whose default applies only where its object or variant is in use: the row's default moves to when_used.
inline Setting when_used(Setting s) {
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
inline Setting bound(Field f, Setting s) {
  s.def = f.read(Run{});
  s.field = std::move(f);
  return s;
}
// Row `s` bound to its field for parse() only: a key with no default of its own, or DeepSpeed's (warmup_num_steps).
inline Setting writes(Field f, Setting s) {
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

inline void append(std::vector<Setting>& rows, std::vector<Setting> more) {
  for (Setting& s : more) rows.push_back(std::move(s));
}
// The rows settings_rows_run.cc holds.
std::vector<Setting> lora_rows();
// One of DeepSpeed's monitors, "tensorboard" or "csv_monitor", with its defaults (output_path "" is the run folder);
// `files` names what it writes.
std::vector<Setting> monitor_rows(const std::string& key, spec::MonitorConfig Run::*which, const std::string& doc,
                                  const std::string& files);
std::vector<Setting> run_rows();
std::vector<Setting> parallel_rows();

}  // namespace tandem::config::rows
