// The config schema: which keys exist at each level, their types, ranges and defaults (validate()).
// DeepSpeed's keys that Tandem does not read are judged by deepspeed_keys.cc, "auto" values by
// auto_values.cc; batch-size arithmetic is in batch.cc; reading files, overrides and the typed view are in
// config.cc.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "tandem/config/auto_values.h"
#include "tandem/config/config.h"
#include "tandem/config/deepspeed_keys.h"
#include "tandem/config/fields.h"
#include "tandem/config/hf_config.h"
#include "tandem/core/error.h"
#include "tandem/core/units.h"
#include "tandem/spec/schedule.h"

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
          "device_memory",
          "eval"};
}
std::vector<std::string> mlp_keys() { return {"type", "sizes", "activation"}; }
std::vector<std::string> gpt_keys() {
  return {"type", "vocab_size", "seq_len", "dim", "layers", "heads", "tie_word_embeddings", "from_pretrained"};
}

std::vector<std::string> llama_keys() {
  return {"type",
          "vocab_size",
          "seq_len",
          "hidden_size",
          "intermediate_size",
          "num_hidden_layers",
          "num_attention_heads",
          "num_key_value_heads",
          "head_dim",
          "max_position_embeddings",
          "rms_norm_eps",
          "rope_theta",
          "rope_scaling",
          "tie_word_embeddings",
          "attention_bias",
          "qkv_bias",
          "mlp_bias",
          "hidden_act",
          "from_pretrained"};
}

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

// Fields::only for an object of Tandem's schema that also accepts the DeepSpeed keys catalogued there: each
// of those is judged (a refused one throws; a no-effect one is added to `no_effect`). `reserved` keys are
// accepted without being listed as valid ones; their own check is elsewhere.
void only_with_deepspeed(Fields& f, const std::vector<std::string>& own, std::vector<std::string>& no_effect,
                         const std::vector<std::string>& elsewhere = {}, const std::string& variant = "",
                         const std::vector<std::string>& reserved = {}) {
  const std::vector<std::string> deepspeed = minus(deepspeed_extras(f.path()), merged({own, elsewhere}));
  f.only(own, elsewhere, variant, merged({deepspeed, reserved}));
  for (const std::string& key : deepspeed)
    if (f.has(key)) check_deepspeed_key(f.path(key), f.raw(key), no_effect);
}

// An optimizer or scheduler type DeepSpeed has and Tandem does not is refused by name.
void refuse_deepspeed_type(Fields& f, const std::string& key) {
  if (!f.has(key) || !f.raw(key).is_string()) return;
  const std::string why = deepspeed_type_refusal(f.path(key), f.raw(key).get<std::string>());
  if (!why.empty()) TANDEM_FAIL(f.path(key), " ", show(f.raw(key)), ": ", why);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// DeepSpeed's WarmupLR and WarmupDecayLR peak at scheduler.params.warmup_max_lr. When optimizer.params.lr is
// not given, it is that peak too, so that only a user's own, differing lr is reported as unused.
double default_lr(const Json& cfg) {
  const auto s = cfg.find("scheduler");
  if (s == cfg.end() || !s->is_object()) return 1e-3;
  const auto type = s->find("type"), params = s->find("params");
  if (type == s->end() || !type->is_string() || params == s->end() || !params->is_object()) return 1e-3;
  const std::string t = lower(type->get<std::string>());
  const auto peak = params->find("warmup_max_lr");
  if ((t != "warmuplr" && t != "warmupdecaylr") || peak == params->end() || !peak->is_number()) return 1e-3;
  const double lr = peak->get<double>();
  return std::isfinite(lr) && lr >= 0 ? lr : 1e-3;
}

void validate_optimizer(Json& obj, double lr, std::vector<std::string>& no_effect) {
  Fields o(obj, "optimizer");
  only_with_deepspeed(o, {"type", "params"}, no_effect);
  refuse_deepspeed_type(o, "type");
  const std::string type = o.choice("type", "AdamW", {"AdamW", "Adam"});
  Fields p(o.object("params"), "optimizer.params");
  only_with_deepspeed(p, {"lr", "betas", "eps", "weight_decay", "adam_w_mode"}, no_effect);
  p.number("lr", lr, 0.0);
  if (!p.has("betas")) p.raw("betas") = Json::array({0.9, 0.999});
  const Json& betas = p.raw("betas");
  const auto beta_ok = [](const Json& b) { return b.is_number() && b.get<double>() >= 0 && b.get<double>() < 1; };
  if (!betas.is_array() || betas.size() != 2 || !beta_ok(betas[0]) || !beta_ok(betas[1]))
    p.fail_type("betas", "a pair [beta1, beta2] of numbers in [0, 1), e.g. [0.9, 0.999]");
  p.number("eps", 1e-8, 0.0, std::numeric_limits<double>::infinity(), /*min_exclusive=*/true);
  p.number("weight_decay", 0.0, 0.0);
  // DeepSpeed's Adam decouples the decay too unless adam_w_mode is false (L2); its AdamW always does.
  const bool decoupled = p.boolean("adam_w_mode", true);
  if (type == "AdamW" && !decoupled)
    TANDEM_FAIL(
        "optimizer.params.adam_w_mode is false but optimizer.type is \"AdamW\", whose weight decay is always "
        "decoupled: for Adam with L2 regularisation (the decay added to the gradient) set optimizer.type to "
        "\"Adam\", otherwise remove adam_w_mode");
}

// DeepSpeed's schedules with its parameters and defaults (warmup 1000 steps, "log" warmup, cosine floor 1e-4);
// the ends of the decays default to the run's steps.
void validate_scheduler(Json& obj, int64_t steps, std::vector<std::string>& no_effect) {
  Fields s(obj, "scheduler");
  s.only({"type", "params"});
  refuse_deepspeed_type(s, "type");
  const std::string type = s.choice("type", "Constant", {"Constant", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"});
  Fields p(s.object("params"), "scheduler.params");
  const std::vector<std::string> warmup = {"warmup_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_type"};
  const std::vector<std::string> decay = merged({warmup, {"total_num_steps"}});
  const std::vector<std::string> cosine = {"warmup_num_steps", "total_num_steps", "warmup_min_ratio", "cos_min_ratio",
                                           "warmup_type"};
  const std::vector<std::string> all = merged({decay, cosine});
  const std::string variant = "scheduler type '" + type + "'";
  if (type == "Constant") {
    p.only({}, all, variant);
    return;
  }
  const std::vector<std::string>& own = type == "WarmupLR" ? warmup : type == "WarmupDecayLR" ? decay : cosine;
  only_with_deepspeed(p, own, no_effect, minus(all, own), variant);
  const bool warm_given = p.has("warmup_num_steps");
  const int64_t warm = p.integer("warmup_num_steps", 1000, 0);
  p.choice("warmup_type", "log", {"log", "linear"});
  if (type == "WarmupCosineLR") {
    p.number("warmup_min_ratio", 0.0, 0.0, 1.0);
    p.number("cos_min_ratio", 1e-4, 0.0, 1.0);
  } else {
    p.number("warmup_min_lr", 0.0, 0.0);
    if (p.has("warmup_max_lr")) p.number("warmup_max_lr", std::nullopt, 0.0);
  }
  if (type == "WarmupLR") return;
  const bool total_given = p.has("total_num_steps");
  const int64_t total = p.integer("total_num_steps", steps, 1);
  if (warm > total)
    TANDEM_FAIL("scheduler.params.warmup_num_steps (", warm, warm_given ? "" : ", DeepSpeed's default",
                ") exceeds scheduler.params.total_num_steps (", total, total_given ? "" : ", the run's steps",
                "): lower the warmup or raise total_num_steps");
}

void validate_precision(Fields& top, std::vector<std::string>& no_effect) {
  Fields z(top.object("zero_optimization"), "zero_optimization");
  only_with_deepspeed(z, {"stage"}, no_effect);
  z.integer("stage", 0, 0, 3);

  Fields h(top.object("fp16"), "fp16");
  only_with_deepspeed(
      h, {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale"},
      no_effect);
  const bool fp16 = h.boolean("enabled", false);
  h.number("loss_scale", 0.0, 0.0);
  h.integer("initial_scale_power", 16, 0, 126);  // 2^127 would overflow fp32
  h.integer("loss_scale_window", 1000, 1);
  h.integer("hysteresis", 2, 1);
  h.number("min_loss_scale", 1.0, 0.0, std::numeric_limits<double>::infinity(), /*min_exclusive=*/true);

  Fields b(top.object("bf16"), "bf16");
  only_with_deepspeed(b, {"enabled"}, no_effect);
  const bool bf16 = b.boolean("enabled", false);
  if (fp16 && bf16)
    TANDEM_FAIL(
        "fp16.enabled and bf16.enabled are both true: choose one mixed-precision mode and set the other's "
        "\"enabled\" to false");
}

// The divisor of n nearest to `near`, to suggest.
int64_t nearest_divisor(int64_t n, int64_t near) {
  int64_t divisor = 1;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0 && std::llabs(d - near) < std::llabs(divisor - near)) divisor = d;
  return divisor;
}

// "rope_scaling": null or Llama 3's frequency-dependent scaling, with Hugging Face's keys (all required, as
// transformers requires them).
void validate_rope_scaling(Fields& m) {
  if (!m.has("rope_scaling") || m.raw("rope_scaling").is_null()) {
    m.raw("rope_scaling") = nullptr;
    return;
  }
  if (!m.raw("rope_scaling").is_object())
    m.fail_type("rope_scaling", "null or an object {\"rope_type\": \"llama3\", ...}");
  Json& scaling = m.object("rope_scaling");
  // transformers reads the older spelling "type" where "rope_type" is absent; so does Tandem, writing "rope_type".
  if (scaling.contains("type") && !scaling.contains("rope_type")) {
    scaling["rope_type"] = scaling["type"];
    scaling.erase("type");
  }
  Fields r(scaling, "model.rope_scaling");
  r.only({"rope_type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  if (!r.has("rope_type"))
    TANDEM_FAIL(
        "missing required config key 'model.rope_scaling.rope_type' (\"llama3\", or \"rope_scaling\": null "
        "for none)");
  const Json& type = r.raw("rope_type");
  if (!type.is_string()) r.fail_type("rope_type", "\"llama3\"");
  if (type.get<std::string>() == "default") {  // transformers' name for no scaling
    m.raw("rope_scaling") = nullptr;
    return;
  }
  if (type.get<std::string>() != "llama3")
    TANDEM_FAIL("model.rope_scaling.rope_type '", type.get<std::string>(),
                "' is not supported: Tandem scales rope only as Llama 3 does; use \"llama3\" or set "
                "\"rope_scaling\": null");
  r.number("factor", std::nullopt, 1.0);
  const double low = r.number("low_freq_factor", std::nullopt, 0.0, std::numeric_limits<double>::infinity(), true);
  const double high = r.number("high_freq_factor", std::nullopt, 0.0, std::numeric_limits<double>::infinity(), true);
  r.integer("original_max_position_embeddings", std::nullopt, 1, int64_t{1} << 24);
  if (low >= high)
    TANDEM_FAIL("model.rope_scaling.low_freq_factor (", low, ") must be lower than high_freq_factor (", high,
                "): Llama 3 uses 1 and 4");
}

// "type": "llama", with Hugging Face LlamaConfig's key names and defaults; "seq_len" is the training length.
void validate_llama(Fields& m) {
  // Bounds far above any trainable model; they keep the size arithmetic inside int64.
  m.integer("vocab_size", std::nullopt, 1, int64_t{1} << 31);
  const int64_t seq_len = m.integer("seq_len", std::nullopt, 1, int64_t{1} << 24);
  const int64_t hidden = m.integer("hidden_size", std::nullopt, 1, int64_t{1} << 20);
  m.integer("intermediate_size", std::nullopt, 1, int64_t{1} << 22);
  m.integer("num_hidden_layers", std::nullopt, 1, int64_t{1} << 16);
  const int64_t heads = m.integer("num_attention_heads", std::nullopt, 1, int64_t{1} << 16);
  const int64_t kv_heads = m.integer("num_key_value_heads", heads, 1, int64_t{1} << 16);
  if (heads % kv_heads != 0)
    TANDEM_FAIL("model.num_attention_heads (", heads, ") is not divisible by model.num_key_value_heads (", kv_heads,
                "): each key/value head serves an equal group of query heads; set num_key_value_heads to a divisor "
                "of ",
                heads, " (e.g. ", nearest_divisor(heads, kv_heads), ")");
  if (!m.has("head_dim") && hidden % heads != 0)
    TANDEM_FAIL("model.hidden_size (", hidden, ") is not divisible by model.num_attention_heads (", heads,
                "): each head gets hidden_size / num_attention_heads channels unless model.head_dim says otherwise; "
                "set num_attention_heads to a divisor of ",
                hidden, " (e.g. ", nearest_divisor(hidden, heads), "), or give head_dim");
  m.integer("head_dim", hidden / heads, 1, int64_t{1} << 16);
  const int64_t max_positions = m.integer("max_position_embeddings", seq_len, 1, int64_t{1} << 24);
  if (seq_len > max_positions)
    TANDEM_FAIL("model.seq_len (", seq_len, ") exceeds model.max_position_embeddings (", max_positions,
                "): lower seq_len to at most ", max_positions, " or raise max_position_embeddings");
  m.number("rms_norm_eps", 1e-6, 0.0, 1.0, /*min_exclusive=*/true);
  m.number("rope_theta", 10000.0, 0.0, std::numeric_limits<double>::infinity(), /*min_exclusive=*/true);
  validate_rope_scaling(m);
  m.boolean("tie_word_embeddings", false);
  const bool attention_bias = m.boolean("attention_bias", false);
  // Qwen2's form: biases on q, k and v only (attention_bias also biases o, as Llama's does).
  if (m.boolean("qkv_bias", false) && attention_bias)
    TANDEM_FAIL("model.qkv_bias and model.attention_bias are both true: attention_bias already biases q, k and v ",
                "(and o); set one of them");
  // Hugging Face configs carry these; Tandem's llama has one MLP form.
  if (m.boolean("mlp_bias", false))
    TANDEM_FAIL("model.mlp_bias true is not supported: Tandem's llama MLP has no biases; set \"mlp_bias\": false");
  const Json& act = m.has("hidden_act") ? m.raw("hidden_act") : Json("silu");
  if (!act.is_string()) m.fail_type("hidden_act", "\"silu\"");
  if (act.get<std::string>() != "silu")
    TANDEM_FAIL("model.hidden_act '", act.get<std::string>(),
                "' is not supported: Tandem's llama MLP is SwiGLU, gated by silu; set \"hidden_act\": \"silu\"");
  m.raw("hidden_act") = "silu";
}

void validate_model(Fields& top) {
  if (!top.has("model"))
    TANDEM_FAIL(
        "missing required config key 'model': add e.g. \"model\": {\"type\": \"mlp\", \"sizes\": [784, 256, "
        "10]} or {\"type\": \"gpt\", \"vocab_size\": 256, \"seq_len\": 128, \"dim\": 128, \"layers\": 2, "
        "\"heads\": 4}");
  expand_from_pretrained(top.object("model"));  // {"from_pretrained": DIR, "seq_len": N}: DIR's config.json
  Fields m(top.object("model"), "model");
  // The type decides which keys are valid, so read it before checking the others.
  const std::string type = m.choice("type", std::nullopt, {"mlp", "gpt", "llama"});
  const std::string variant = "model type '" + type + "'";
  const std::vector<std::string> all_keys = merged({mlp_keys(), gpt_keys(), llama_keys()});
  if (type == "llama") {
    m.only(llama_keys(), minus(all_keys, llama_keys()), variant);
    validate_llama(m);
  } else if (type == "mlp") {
    m.only(mlp_keys(), minus(all_keys, mlp_keys()), variant);
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
    m.only(gpt_keys(), minus(all_keys, gpt_keys()), variant);
    // Bounds far above any trainable model; they keep the size arithmetic inside int64.
    m.integer("vocab_size", std::nullopt, 1, int64_t{1} << 31);
    m.integer("seq_len", std::nullopt, 1, int64_t{1} << 24);
    m.integer("layers", std::nullopt, 1, int64_t{1} << 16);
    const int64_t dim = m.integer("dim", std::nullopt, 1, int64_t{1} << 20);
    const int64_t heads = m.integer("heads", std::nullopt, 1, int64_t{1} << 16);
    m.boolean("tie_word_embeddings", false);
    if (dim % heads != 0) {
      TANDEM_FAIL("model.dim (", dim, ") is not divisible by model.heads (", heads,
                  "): each head gets dim / heads channels; set heads to a divisor of ", dim, " (e.g. ",
                  nearest_divisor(dim, heads), ") or dim to a multiple of ", heads, " (e.g. ",
                  (dim / heads + 1) * heads, ")");
    }
  }
}

// A data object ("data", or "eval.data") for a model of `model_type`.
void validate_data_object(Json& object, const std::string& name, const std::string& model_type) {
  Fields d(object, name);
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
  if (type != "synthetic" && model_type == "mlp")
    TANDEM_FAIL(name, ".type '", type, "' yields token sequences, which model type '", model_type,
                "' cannot take: use ", name, ".type \"synthetic\" or model.type \"gpt\"");
}

void validate_data(Fields& top) {
  validate_data_object(top.object("data"), "data", top.raw("model")["type"].get<std::string>());
}

// "eval": {"data": {...}, "every": N, "steps": K}: the loss on K global batches of held-out data, with no update,
// every N steps (0: after the last step only) and after the last.
void validate_eval(Fields& top) {
  if (!top.has("eval")) return;
  Fields e(top.object("eval"), "eval");
  e.only({"data", "every", "steps"});
  if (!e.has("data"))
    TANDEM_FAIL("missing required config key 'eval.data': the held-out data, as \"data\" is written, e.g. ",
                "{\"type\": \"tokens\", \"path\": \"val.bin\"}");
  validate_data_object(e.object("data"), "eval.data", top.raw("model")["type"].get<std::string>());
  e.integer("every", 0, 0);
  e.integer("steps", 10, 1);
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
  if (p.has("schedule")) p.choice("schedule", std::nullopt, spec::schedule_names());
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

Json validate(Json cfg, std::vector<std::string>& no_effect) {
  no_effect.clear();
  Fields top(cfg, "");
  resolve_auto(cfg);
  only_with_deepspeed(top, top_keys(), no_effect, {}, "", {kAutoRecord});
  for (const char* key : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"})
    if (top.has(key)) top.integer(key, std::nullopt, 1);
  const int64_t steps = top.integer("steps", 100, 1);
  top.integer("seed", 1234, 0);
  top.integer("steps_per_print", 1, 1);
  const double lr = default_lr(cfg);
  validate_optimizer(top.object("optimizer"), lr, no_effect);
  validate_scheduler(top.object("scheduler"), steps, no_effect);
  top.number("gradient_clipping", 0.0, 0.0);
  validate_precision(top, no_effect);
  validate_model(top);
  validate_data(top);
  validate_eval(top);
  validate_parallel(top);
  Fields c(top.object("checkpoint"), "checkpoint");
  only_with_deepspeed(c, {"every", "keep", "at_end"}, no_effect);
  c.integer("every", 0, 0);
  c.integer("keep", 3, 1);
  c.boolean("at_end", true);
  validate_device_memory(top);
  check_auto(cfg);
  std::sort(no_effect.begin(), no_effect.end());
  return cfg;
}

Json validate_model(Json model) {
  Json top = {{"model", std::move(model)}};
  Fields t(top, "");
  validate_model(t);
  return top.at("model");
}

Json validate(Json cfg) {
  std::vector<std::string> no_effect;
  return validate(std::move(cfg), no_effect);
}

}  // namespace tandem::config
