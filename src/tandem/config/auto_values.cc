// "auto" values of configs written for the Hugging Face Trainer's DeepSpeed integration: which keys accept
// them, what each becomes (the Trainer fills them from its arguments; Tandem takes those arguments' defaults,
// or its own where it has a default of its own), the record that survives re-validation, and the line that
// reports them.
#include "tandem/config/auto_values.h"

#include <algorithm>
#include <vector>

#include "tandem/config/fields.h"
#include "tandem/core/error.h"

namespace tandem::config {
namespace {

enum class Auto {
  kDerived,   // removed: derived like an absent batch key
  kAbsent,    // removed: Tandem's default, as if the key were absent
  kTrainer,   // set to the Trainer's default argument
  kNoEffect,  // left as "auto": the key has no effect in Tandem
};

struct AutoKey {
  const char* path;
  Auto how;
  Json value;       // kTrainer: the value
  const char* why;  // kTrainer: where the value comes from
};

const std::vector<AutoKey>& auto_keys() {
  static const std::vector<AutoKey> keys = {
      {"train_batch_size", Auto::kDerived, nullptr, ""},
      {"train_micro_batch_size_per_gpu", Auto::kDerived, nullptr, ""},
      {"gradient_accumulation_steps", Auto::kDerived, nullptr, ""},
      {"gradient_clipping", Auto::kTrainer, 1.0, "the Trainer's max_grad_norm default"},
      {"optimizer.params.lr", Auto::kAbsent, nullptr, ""},
      {"optimizer.params.betas", Auto::kAbsent, nullptr, ""},
      {"optimizer.params.eps", Auto::kAbsent, nullptr, ""},
      {"optimizer.params.weight_decay", Auto::kAbsent, nullptr, ""},
      {"scheduler.params.warmup_min_lr", Auto::kTrainer, 0.0, "what the Trainer writes"},
      {"scheduler.params.warmup_max_lr", Auto::kAbsent, nullptr, ""},
      {"scheduler.params.warmup_num_steps", Auto::kTrainer, 0, "the Trainer's warmup_steps default"},
      {"scheduler.params.total_num_steps", Auto::kAbsent, nullptr, ""},
      {"fp16.enabled", Auto::kTrainer, false, "the Trainer's fp16 default"},
      {"bf16.enabled", Auto::kTrainer, false, "the Trainer's bf16 default"},
      {"amp.enabled", Auto::kTrainer, false, "the Trainer's fp16 default"},
      {"amp.opt_level", Auto::kNoEffect, nullptr, ""},
      {"zero_optimization.reduce_bucket_size", Auto::kNoEffect, nullptr, ""},
      {"zero_optimization.stage3_prefetch_bucket_size", Auto::kNoEffect, nullptr, ""},
      {"zero_optimization.stage3_param_persistence_threshold", Auto::kNoEffect, nullptr, ""},
  };
  return keys;
}

const AutoKey* auto_key(const std::string& path) {
  for (const AutoKey& k : auto_keys())
    if (path == k.path) return &k;
  return nullptr;
}

constexpr const char* kMicro = "train_micro_batch_size_per_gpu";
// The Trainer's per_device_train_batch_size default: the batch when every batch key is "auto".
constexpr int64_t kTrainerMicroBatch = 8;

bool is_auto(const Json* v) { return v && v->is_string() && v->get<std::string>() == "auto"; }

// The value at dotted `path` through objects, or null.
Json* find(Json& cfg, const std::string& path) {
  Json* node = &cfg;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string part = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!node->is_object()) return nullptr;
    const auto it = node->find(part);
    if (it == node->end()) return nullptr;
    node = &*it;
    if (dot == std::string::npos) return node;
    begin = dot + 1;
  }
}
const Json* find(const Json& cfg, const std::string& path) { return find(const_cast<Json&>(cfg), path); }

void erase(Json& cfg, const std::string& path) {
  const size_t dot = path.rfind('.');
  Json* parent = dot == std::string::npos ? &cfg : find(cfg, path.substr(0, dot));
  if (parent && parent->is_object()) parent->erase(dot == std::string::npos ? path : path.substr(dot + 1));
}

// No config key lies this deep; below it only the contents of DeepSpeed objects of no effect, which are not
// looked into (and a deeper walk would risk the stack on a pathological file).
constexpr int kMaxDepth = 16;

void refuse_auto_in(const Json& v, const std::string& path, int depth) {
  if (depth > kMaxDepth) return;
  if (path == "parallel" || path == "data.path" || path == kAutoRecord) return;  // Tandem's own meanings
  if (is_auto(&v)) {
    const AutoKey* k = auto_key(path);
    if (!k || k->how != Auto::kNoEffect)
      TANDEM_FAIL("config key '", path,
                  "' is \"auto\": Tandem resolves \"auto\" only at the keys the Hugging Face Trainer fills (the "
                  "batch sizes, gradient_clipping, optimizer.params lr, betas, eps and weight_decay, "
                  "scheduler.params warmup_min_lr, warmup_max_lr, warmup_num_steps and total_num_steps, "
                  "fp16.enabled, bf16.enabled; docs/deepspeed.md): write a value");
  }
  if (v.is_object())
    for (const auto& [key, sub] : v.items()) refuse_auto_in(sub, path.empty() ? key : path + "." + key, depth + 1);
  if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i) refuse_auto_in(v[i], path + "[" + std::to_string(i) + "]", depth + 1);
}

// The keys recorded as "auto" so far; throws when the record is not Tandem's.
std::vector<std::string> read_record(const Json& cfg) {
  std::vector<std::string> record;
  const auto it = cfg.find(kAutoRecord);
  if (it == cfg.end()) return record;
  bool ok = it->is_array();
  for (size_t i = 0; ok && i < it->size(); ++i) {
    ok = (*it)[i].is_string() && auto_key((*it)[i].get<std::string>());
    if (ok) record.push_back((*it)[i].get<std::string>());
  }
  if (!ok)
    TANDEM_FAIL("config key '", kAutoRecord, "' is ", show(*it),
                ": Tandem writes it (the keys whose \"auto\" it resolved); remove it");
  return record;
}

}  // namespace

void resolve_auto(Json& cfg) {
  if (!cfg.is_object()) return;
  std::vector<std::string> record = read_record(cfg);
  bool batch_auto = false;
  for (const AutoKey& k : auto_keys()) {
    Json* v = find(cfg, k.path);
    if (!is_auto(v)) continue;
    if (std::find(record.begin(), record.end(), k.path) == record.end()) record.push_back(k.path);
    if (k.how == Auto::kDerived) batch_auto = true;
    if (k.how == Auto::kDerived || k.how == Auto::kAbsent) erase(cfg, k.path);
    if (k.how == Auto::kTrainer) *v = k.value;
  }
  // Nothing left that gives the batch: the Trainer's per-device batch, without accumulation.
  if (batch_auto && !cfg.contains("train_batch_size") && !cfg.contains(kMicro)) cfg[kMicro] = kTrainerMicroBatch;
  if (!record.empty()) cfg[kAutoRecord] = record;
}

void check_auto(const Json& cfg) {
  read_record(cfg);
  refuse_auto_in(cfg, "", 0);
}

std::string auto_line(const Json& cfg, const BatchSizes& batch) {
  const Json* record = find(cfg, kAutoRecord);
  if (!record || !record->is_array() || record->empty()) return "";
  std::string line = "\"auto\" values (as the Hugging Face Trainer fills them, docs/deepspeed.md):";
  bool first = true;
  for (const Json& p : *record) {
    if (!p.is_string()) continue;
    const std::string path = p.get<std::string>();
    const AutoKey* k = auto_key(path);
    if (!k) continue;
    const Json* v = find(cfg, path);
    std::string what;
    if (k->how == Auto::kNoEffect || is_auto(v)) {
      what = "no effect";
    } else if (k->how == Auto::kDerived) {
      const int64_t n = path == "train_batch_size" ? batch.global : path == kMicro ? batch.micro : batch.accum;
      what = std::to_string(n) +
             (v && path == kMicro ? " (the Trainer's per_device_train_batch_size default)" : " (derived)");
    } else if (k->how == Auto::kTrainer) {
      what = (v ? show(*v) : std::string("unused")) + " (" + k->why + ")";
    } else if (path == "scheduler.params.warmup_max_lr") {
      const Json* type = find(cfg, "scheduler.type");
      const bool used = type && type->is_string() &&
                        (type->get<std::string>() == "WarmupLR" || type->get<std::string>() == "WarmupDecayLR");
      what = used ? "optimizer.params.lr (" + show(cfg.at("optimizer").at("params").at("lr")) + ")"
                  : "unused by this scheduler";
    } else {
      what = v ? show(*v) + " (as if absent)" : std::string("unused by this scheduler");
    }
    line += std::string(first ? " " : ", ") + path + " -> " + what;
    first = false;
  }
  return line;
}

}  // namespace tandem::config
