// The config schema: which keys exist at each level, their types, ranges and defaults (validate()).
// Batch-size arithmetic is in batch.cc; reading files, overrides and the typed view are in config.cc.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/config/fields.h"
#include "tandem/core/error.h"
#include "tandem/core/units.h"

namespace tandem::config {
namespace {

std::vector<std::string> top_keys() {
  return {"train_batch_size",
          "train_micro_batch_size_per_gpu",
          "gradient_accumulation_steps",
          "steps",
          "seed",
          "steps_per_print",
          "optimizer",
          "scheduler",
          "gradient_clipping",
          "zero_optimization",
          "fp16",
          "bf16",
          "model",
          "data",
          "parallel",
          "checkpoint",
          "device_memory"};
}
std::vector<std::string> mlp_keys() { return {"type", "sizes", "activation"}; }
std::vector<std::string> gpt_keys() { return {"type", "vocab_size", "seq_len", "dim", "layers", "heads"}; }

std::vector<std::string> minus(const std::vector<std::string>& all, const std::vector<std::string>& drop) {
  std::vector<std::string> out;
  for (const auto& k : all)
    if (std::find(drop.begin(), drop.end(), k) == drop.end()) out.push_back(k);
  return out;
}

std::vector<std::string> merged(std::initializer_list<std::vector<std::string>> lists) {
  std::vector<std::string> out;
  for (const auto& l : lists)
    for (const auto& k : l)
      if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  return out;
}

void validate_optimizer(Json& obj) {
  Fields o(obj, "optimizer");
  o.only({"type", "params"});
  const std::string type = o.choice("type", "AdamW", {"AdamW", "Adam"});
  Fields p(o.object("params"), "optimizer.params");
  p.only({"lr", "betas", "eps", "weight_decay"});
  p.number("lr", 1e-3, 0.0);
  if (!p.has("betas")) p.raw("betas") = Json::array({0.9, 0.999});
  const Json& betas = p.raw("betas");
  const auto beta_ok = [](const Json& b) { return b.is_number() && b.get<double>() >= 0 && b.get<double>() < 1; };
  if (!betas.is_array() || betas.size() != 2 || !beta_ok(betas[0]) || !beta_ok(betas[1]))
    p.fail_type("betas", "a pair [beta1, beta2] of numbers in [0, 1), e.g. [0.9, 0.999]");
  p.number("eps", 1e-8, 0.0, std::numeric_limits<double>::infinity(), /*min_exclusive=*/true);
  p.number("weight_decay", 0.0, 0.0);
  // Adam is AdamW without decay, by definition here; the value a DeepSpeed config carries is overridden.
  if (type == "Adam") p.raw("weight_decay") = 0.0;
}

void validate_scheduler(Json& obj, int64_t steps) {
  Fields s(obj, "scheduler");
  s.only({"type", "params"});
  const std::string type = s.choice("type", "Constant", {"Constant", "WarmupLR", "WarmupCosineLR"});
  Fields p(s.object("params"), "scheduler.params");
  const std::vector<std::string> warmup = {"warmup_num_steps", "warmup_min_lr"};
  const std::vector<std::string> cosine = {"warmup_num_steps", "total_num_steps", "warmup_min_ratio", "cos_min_ratio"};
  const std::string variant = "scheduler type '" + type + "'";
  if (type == "Constant") {
    p.only({}, merged({warmup, cosine}), variant);
  } else if (type == "WarmupLR") {
    p.only(warmup, minus(cosine, warmup), variant);
    p.integer("warmup_num_steps", 0, 0);
    p.number("warmup_min_lr", 0.0, 0.0);
  } else {
    p.only(cosine, minus(warmup, cosine), variant);
    const int64_t warm = p.integer("warmup_num_steps", 0, 0);
    const int64_t total = p.integer("total_num_steps", steps, 1);
    p.number("warmup_min_ratio", 0.0, 0.0, 1.0);
    p.number("cos_min_ratio", 0.1, 0.0, 1.0);
    if (warm > total)
      TANDEM_FAIL("scheduler.params.warmup_num_steps (", warm, ") exceeds scheduler.params.total_num_steps (", total,
                  "): lower the warmup or raise total_num_steps");
  }
}

void validate_precision(Fields& top) {
  Fields z(top.object("zero_optimization"), "zero_optimization");
  z.only({"stage"});
  z.integer("stage", 0, 0, 3);

  Fields h(top.object("fp16"), "fp16");
  h.only({"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale"});
  const bool fp16 = h.boolean("enabled", false);
  h.number("loss_scale", 0.0, 0.0);
  h.integer("initial_scale_power", 16, 0, 126);  // 2^127 would overflow fp32
  h.integer("loss_scale_window", 1000, 1);
  h.integer("hysteresis", 2, 1);
  h.number("min_loss_scale", 1.0, 0.0, std::numeric_limits<double>::infinity(), /*min_exclusive=*/true);

  Fields b(top.object("bf16"), "bf16");
  b.only({"enabled"});
  const bool bf16 = b.boolean("enabled", false);
  if (fp16 && bf16)
    TANDEM_FAIL(
        "fp16.enabled and bf16.enabled are both true: choose one mixed-precision mode and set the other's "
        "\"enabled\" to false");
}

void validate_model(Fields& top) {
  if (!top.has("model"))
    TANDEM_FAIL(
        "missing required config key 'model': add e.g. \"model\": {\"type\": \"mlp\", \"sizes\": [784, 256, "
        "10]} or {\"type\": \"gpt\", \"vocab_size\": 256, \"seq_len\": 128, \"dim\": 128, \"layers\": 2, "
        "\"heads\": 4}");
  Fields m(top.object("model"), "model");
  // The type decides which keys are valid, so read it before checking the others.
  const std::string type = m.choice("type", std::nullopt, {"mlp", "gpt"});
  const std::string variant = "model type '" + type + "'";
  if (type == "mlp") {
    m.only(mlp_keys(), minus(gpt_keys(), mlp_keys()), variant);
    if (!m.has("sizes")) TANDEM_FAIL("missing required config key 'model.sizes' (layer widths, e.g. [784, 256, 10])");
    const Json& sizes = m.raw("sizes");
    bool ok = sizes.is_array() && sizes.size() >= 2;
    for (size_t i = 0; ok && i < sizes.size(); ++i) {
      const int64_t w = as_integer(sizes[i]).value_or(0);
      ok = w >= 1 && w <= (int64_t{1} << 24);
    }
    if (!ok) m.fail_type("sizes", "an array of at least two integers in [1, 2^24] (input, hidden..., classes)");
    m.choice("activation", "relu", {"relu", "gelu"});
  } else {
    m.only(gpt_keys(), minus(mlp_keys(), gpt_keys()), variant);
    // Bounds far above any trainable model; they keep the size arithmetic inside int64.
    m.integer("vocab_size", std::nullopt, 1, int64_t{1} << 31);
    m.integer("seq_len", std::nullopt, 1, int64_t{1} << 24);
    m.integer("layers", std::nullopt, 1, int64_t{1} << 16);
    const int64_t dim = m.integer("dim", std::nullopt, 1, int64_t{1} << 20);
    const int64_t heads = m.integer("heads", std::nullopt, 1, int64_t{1} << 16);
    if (dim % heads != 0) {
      int64_t divisor = 1;  // the divisor of dim nearest to heads, to suggest
      for (int64_t d = 1; d <= dim; ++d)
        if (dim % d == 0 && std::llabs(d - heads) < std::llabs(divisor - heads)) divisor = d;
      TANDEM_FAIL("model.dim (", dim, ") is not divisible by model.heads (", heads,
                  "): each head gets dim / heads channels; set heads to a divisor of ", dim, " (e.g. ", divisor,
                  ") or dim to a multiple of ", heads, " (e.g. ", (dim / heads + 1) * heads, ")");
    }
  }
}

void validate_data(Fields& top) {
  const std::string model_type = top.raw("model")["type"].get<std::string>();
  Fields d(top.object("data"), "data");
  const std::string type = d.choice("type", "synthetic", {"synthetic", "text", "tokens"});
  const std::string variant = "data type '" + type + "'";
  if (type == "synthetic") {
    d.only({"type", "samples"}, {"path", "dtype"}, variant);
    d.integer("samples", 65536, 1);
  } else if (type == "text") {
    d.only({"type", "path"}, {"samples", "dtype"}, variant);
    d.string("path", std::nullopt);
  } else {
    d.only({"type", "path", "dtype"}, {"samples"}, variant);
    d.string("path", std::nullopt);
    d.choice("dtype", "uint16", {"uint16", "uint32"});
  }
  if (type != "synthetic" && model_type != "gpt")
    TANDEM_FAIL("data.type '", type, "' yields token sequences, which model type '", model_type,
                "' cannot take: use data.type \"synthetic\" or model.type \"gpt\"");
}

void validate_parallel(Fields& top) {
  if (!top.has("parallel")) return;
  Json& par = top.raw("parallel");
  if (par.is_string()) {
    if (par.get<std::string>() != "auto") top.fail_type("parallel", "\"auto\" or an object {...}");
    return;
  }
  if (!par.is_object()) top.fail_type("parallel", "\"auto\" or an object {...}");
  Fields p(par, "parallel");
  p.only({"virtual_gpus", "pipeline", "tensor", "schedule", "virtual_stages", "activation_checkpointing", "stages",
          "timeout_s"});
  // Only names and types for now: the layout code decides defaults and how the values combine.
  for (const char* key : {"virtual_gpus", "pipeline", "tensor", "virtual_stages"})
    if (p.has(key)) p.integer(key, std::nullopt, 1);
  if (p.has("schedule")) p.choice("schedule", std::nullopt, {"gpipe", "1f1b", "interleaved"});
  if (p.has("activation_checkpointing")) p.boolean("activation_checkpointing", std::nullopt);
  if (p.has("timeout_s")) p.number("timeout_s", std::nullopt, 0.0, std::numeric_limits<double>::infinity(), true);
  if (p.has("stages")) {
    const Json& stages = p.raw("stages");
    bool ok = stages.is_array();
    for (size_t i = 0; ok && i < stages.size(); ++i) {
      const Json& s = stages[i];
      ok = s.is_array() && s.size() == 2 && as_integer(s[0]).value_or(-1) >= 0 &&
           as_integer(s[1]).value_or(-1) >= as_integer(s[0]).value_or(0);
    }
    if (!ok)
      p.fail_type("stages", "an array of [first, last] layer pairs with 0 <= first <= last, e.g. [[0, 3], [4, 7]]");
  }
}

void validate_device_memory(Fields& top) {
  if (!top.has("device_memory")) return;
  const Json& v = top.raw("device_memory");
  if (const std::optional<int64_t> bytes = as_integer(v)) {
    if (*bytes < 0) top.fail_type("device_memory", "a size such as \"512MiB\" or a byte count >= 0");
    top.raw("device_memory") = *bytes;
    return;
  }
  if (!v.is_string()) top.fail_type("device_memory", "a size such as \"512MiB\" or a byte count >= 0");
  try {
    parse_bytes(v.get<std::string>());
  } catch (const Error& e) {
    TANDEM_FAIL("config key 'device_memory': ", e.what());
  }
}

}  // namespace

Json validate(Json cfg) {
  Fields top(cfg, "");
  top.only(top_keys());
  for (const char* key : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"})
    if (top.has(key)) top.integer(key, std::nullopt, 1);
  const int64_t steps = top.integer("steps", 100, 1);
  top.integer("seed", 1234, 0);
  top.integer("steps_per_print", 1, 1);
  validate_optimizer(top.object("optimizer"));
  validate_scheduler(top.object("scheduler"), steps);
  top.number("gradient_clipping", 0.0, 0.0);
  validate_precision(top);
  validate_model(top);
  validate_data(top);
  validate_parallel(top);
  Fields c(top.object("checkpoint"), "checkpoint");
  c.only({"every", "keep", "at_end"});
  c.integer("every", 0, 0);
  c.integer("keep", 3, 1);
  c.boolean("at_end", true);
  validate_device_memory(top);
  return cfg;
}

}  // namespace tandem::config
