// The config schema: which keys exist at each level, their types, ranges and defaults (validate()), and the rules that
// join keys. Every section but the model's takes its keys, checks and defaults from the settings table's rows
// (settings.h); the model's keys are its family's own, the llama's checked in schema_llama.cc.
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
#include "tandem/config/lora_config.h"
#include "tandem/config/settings.h"
#include "tandem/core/error.h"
#include "tandem/core/units.h"
#include "tandem/spec/schedule.h"

namespace tandem::config {
namespace {

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
          "family",
          "sliding_window",
          "use_sliding_window",
          "max_window_layers",
          "num_experts",
          "num_experts_per_tok",
          "moe_intermediate_size",
          "norm_topk_prob",
          "decoder_sparse_step",
          "mlp_only_layers",
          "router_aux_loss_coef",
          "output_router_logits",
          "shared_expert_intermediate_size",
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
  only_with_deepspeed(o, setting_keys("optimizer"), no_effect);
  refuse_deepspeed_type(o, "type");
  const std::string type = read_setting(o, "type").get<std::string>();
  Fields p(o.object("params"), "optimizer.params");
  only_with_deepspeed(p, setting_keys("optimizer.params"), no_effect);
  read_setting(p, "lr", Json(lr));
  const Json& betas = read_setting(p, "betas");
  const auto beta_ok = [](const Json& b) { return b.is_number() && b.get<double>() >= 0 && b.get<double>() < 1; };
  if (!betas.is_array() || betas.size() != 2 || !beta_ok(betas[0]) || !beta_ok(betas[1]))
    p.fail_type("betas", "a pair [beta1, beta2] of numbers in [0, 1), e.g. [0.9, 0.999]");
  read_setting(p, "eps");
  read_setting(p, "weight_decay");
  // DeepSpeed's Adam decouples the decay too unless adam_w_mode is false (L2); its AdamW always does.
  const bool decoupled = read_setting(p, "adam_w_mode").get<bool>();
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
  s.only(setting_keys("scheduler"));
  refuse_deepspeed_type(s, "type");
  const std::string type = read_setting(s, "type").get<std::string>();
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
  const int64_t warm = read_setting(p, "warmup_num_steps").get<int64_t>();
  read_setting(p, "warmup_type");
  if (type == "WarmupCosineLR") {
    read_setting(p, "warmup_min_ratio");
    read_setting(p, "cos_min_ratio");
  } else {
    read_setting(p, "warmup_min_lr");
    if (p.has("warmup_max_lr")) read_setting(p, "warmup_max_lr");
  }
  if (type == "WarmupLR") return;
  const bool total_given = p.has("total_num_steps");
  const int64_t total = read_setting(p, "total_num_steps", Json(steps)).get<int64_t>();
  if (warm > total)
    TANDEM_FAIL("scheduler.params.warmup_num_steps (", warm, warm_given ? "" : ", DeepSpeed's default",
                ") exceeds scheduler.params.total_num_steps (", total, total_given ? "" : ", the run's steps",
                "): lower the warmup or raise total_num_steps");
}

// DeepSpeed's older spelling of offloading: "cpu_offload": true is offload_optimizer {"device": "cpu"},
// "cpu_offload_param": true offload_param likewise, "cpu_offload_use_pin_memory" their pin_memory. Written into the
// current keys (which win where both are given) and removed.
void rewrite_cpu_offload(Json& zero) {
  Fields z(zero, "zero_optimization");
  const auto flag = [&](const char* key) {
    if (!z.has(key)) return false;
    const bool on = z.boolean(key, std::nullopt);
    zero.erase(key);
    return on;
  };
  const bool pin = flag("cpu_offload_use_pin_memory");
  for (const auto& [old_key, key] : {std::pair<const char*, const char*>{"cpu_offload", "offload_optimizer"},
                                     {"cpu_offload_param", "offload_param"}}) {
    if (!flag(old_key) || zero.contains(key)) continue;
    zero[key] = {{"device", "cpu"}, {"pin_memory", pin}};
  }
}

// One of zero_optimization's offload objects: its device, where files go with nvme, and the host buffers. The
// optimizer's has Tandem's own update and upload_piece beside DeepSpeed's keys. Like ratio, they are checked and
// written back whether or not a device is set, and change nothing without one.
void validate_offload(Fields& z, const std::string& key, std::vector<std::string>& no_effect) {
  Fields o(z.object(key), z.path(key));
  const std::vector<std::string> own = setting_keys(o.path());
  only_with_deepspeed(o, own, no_effect);
  const std::string device = read_setting(o, "device").get<std::string>();
  for (const std::string& k : own)
    if (k != "device" && k != "nvme_path") read_setting(o, k);
  if (device == "nvme" && !o.has("nvme_path"))
    TANDEM_FAIL("missing required config key '", o.path("nvme_path"), "': ", o.path("device"),
                " \"nvme\" swaps to files in that folder (a fast local disk); give it, or use \"cpu\"");
  if (o.has("nvme_path")) read_setting(o, "nvme_path");
}

void validate_precision(Fields& top, std::vector<std::string>& no_effect) {
  Json& zero = top.object("zero_optimization");
  rewrite_cpu_offload(zero);
  Fields z(zero, "zero_optimization");
  only_with_deepspeed(z, setting_keys("zero_optimization"), no_effect);
  const int64_t stage = read_setting(z, "stage").get<int64_t>();
  validate_offload(z, "offload_optimizer", no_effect);
  validate_offload(z, "offload_param", no_effect);
  const bool optimizer = zero.at("offload_optimizer").at("device") != "none";
  const bool param = zero.at("offload_param").at("device") != "none";
  if (optimizer && stage == 0)
    TANDEM_FAIL(
        "zero_optimization.offload_optimizer needs ZeRO stage 1, 2 or 3, as in DeepSpeed (the offloaded "
        "optimizer updates the shard each replica owns): set zero_optimization.stage to 1, 2 or 3");
  if (param && stage != 3)
    TANDEM_FAIL(
        "zero_optimization.offload_param needs ZeRO stage 3, as in DeepSpeed (the weights leave the device "
        "between their uses): set zero_optimization.stage to 3, or remove offload_param");
  if (param && !optimizer)
    TANDEM_FAIL(
        "zero_optimization.offload_param without offload_optimizer keeps the fp32 master weights on the "
        "device, which take more memory than the weights it offloads: set offload_optimizer.device too");

  Fields h(top.object("fp16"), "fp16");
  only_with_deepspeed(h, setting_keys("fp16"), no_effect);
  for (const std::string& k : setting_keys("fp16")) read_setting(h, k);
  const bool fp16 = h.raw("enabled").get<bool>();

  Fields b(top.object("bf16"), "bf16");
  only_with_deepspeed(b, setting_keys("bf16"), no_effect);
  const bool bf16 = read_setting(b, "enabled").get<bool>();
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
  const std::string type = read_setting(d, "type").get<std::string>();
  const std::string variant = "data type '" + type + "'";
  const std::vector<std::string> documents = {"document_mask", "eos_token_id"};
  if (type == "synthetic") {
    d.only(merged({{"type", "samples"}, documents}), {"path", "dtype"}, variant);
    read_setting(d, "samples");
  } else if (type == "text") {
    d.only(merged({{"type", "path"}, documents}), {"samples", "dtype"}, variant);
    read_setting(d, "path");
  } else {
    d.only(merged({{"type", "path", "dtype"}, documents}), {"samples"}, variant);
    read_setting(d, "path");
    read_setting(d, "dtype");
  }
  // Documents packed into windows: attention kept inside each, the documents ending with eos_token_id.
  if (read_setting(d, "document_mask").get<bool>()) {
    if (!d.has("eos_token_id"))
      TANDEM_FAIL("missing required config key '", name, ".eos_token_id' beside ", name,
                  ".document_mask: the token that ends every document (tools/prepare_data.py prints it)");
    read_setting(d, "eos_token_id");
  } else if (d.has("eos_token_id")) {
    TANDEM_FAIL(
        "config key '", name, ".eos_token_id' has no effect without ", name,
        ".document_mask: true; remove it, or set \"document_mask\": true to keep attention inside each document");
  }
  if (type != "synthetic" && model_type == "mlp")
    TANDEM_FAIL(name, ".type '", type, "' yields token sequences, which model type '", model_type,
                "' cannot take: use ", name, ".type \"synthetic\" or model.type \"gpt\"");
}

void validate_data(Fields& top) {
  validate_data_object(top.object("data"), "data", top.raw("model")["type"].get<std::string>());
}

// "fp8": {"enabled", "recipe", "min_features", "gradient_format"} (spec/fp8.h): the blocks' projections in FP8, with
// bf16 or fp32 compute around them.
void validate_fp8(Fields& top) {
  Fields f(top.object("fp8"), "fp8");
  f.only(setting_keys("fp8"));
  const bool enabled = read_setting(f, "enabled").get<bool>();
  const std::string recipe = read_setting(f, "recipe").get<std::string>();
  read_setting(f, "min_features");
  // Gradients in e5m2 (the range of fp16) where one scale spans a whole tensor or row; the blockwise recipe's small
  // tiles need less range, so it keeps e4m3's extra mantissa bit, as DeepSeek-V3 and Transformer Engine do.
  read_setting(f, "gradient_format", recipe == "blockwise" ? std::optional<Json>("e4m3") : std::nullopt);
  if (!enabled) return;
  if (top.raw("fp16")["enabled"].get<bool>())
    TANDEM_FAIL(
        "fp8 with fp16.enabled: FP8 training computes around its products in bf16 (or fp32), with no loss "
        "scaling; set \"bf16\": {\"enabled\": true} instead of fp16");
  const std::string type = top.raw("model")["type"].get<std::string>();
  if (type != "gpt" && type != "llama")
    TANDEM_FAIL("fp8 runs the projections of gpt and llama blocks, which model type '", type,
                "' does not have: use a gpt or llama model, or remove \"fp8\"");
}

// "device_memory", "host_memory" or "tiles.attention_block_bytes": a size such as "512MiB", or a byte count.
void validate_memory_size(Fields& top, const char* key) {
  if (!top.has(key)) return;
  const Json& v = top.raw(key);
  if (const std::optional<int64_t> bytes = as_integer(v)) {
    if (*bytes < 0) top.fail_type(key, "a size such as \"512MiB\" or a byte count >= 0");
    top.raw(key) = *bytes;
    return;
  }
  if (!v.is_string()) top.fail_type(key, "a size such as \"512MiB\" or a byte count >= 0");
  try {
    parse_bytes(v.get<std::string>());
  } catch (const Error& e) {
    TANDEM_FAIL("config key '", top.path(key), "': ", e.what());
  }
}

// "tiles": {"loss_tokens", "mlp_tokens", "attention_block_bytes"} (spec/tiles.h): how many tokens the loss's chunks
// and the MLPs' tiles take at once, and the bytes a block of the GPU's attention backward takes; 0 (the default) lets
// the rules choose (nn/tiles.h, plan/preflight.cc).
void validate_tiles(Fields& top) {
  Fields t(top.object("tiles"), "tiles");
  t.only(setting_keys("tiles"));
  validate_memory_size(t, "attention_block_bytes");
  for (const std::string& k : setting_keys("tiles")) read_setting(t, k);
}

// "eval": {"data": {...}, "every": N, "steps": K}: the loss on K global batches of held-out data, with no update,
// every N steps (0: after the last step only) and after the last.
void validate_eval(Fields& top) {
  if (!top.has("eval")) return;
  Fields e(top.object("eval"), "eval");
  e.only(setting_keys("eval"));
  if (!e.has("data"))
    TANDEM_FAIL("missing required config key 'eval.data': the held-out data, as \"data\" is written, e.g. ",
                "{\"type\": \"tokens\", \"path\": \"val.bin\"}");
  validate_data_object(e.object("data"), "eval.data", top.raw("model")["type"].get<std::string>());
  read_setting(e, "every");
  read_setting(e, "steps");
}

// DeepSpeed's activation_checkpointing.cpu_checkpointing is parallel.cpu_checkpointing (config.cc reads either): a
// boolean, which must agree with Tandem's key where both are given.
void validate_cpu_checkpointing(Fields& top) {
  if (!top.has("activation_checkpointing") || !top.raw("activation_checkpointing").is_object()) return;
  Fields a(top.raw("activation_checkpointing"), "activation_checkpointing");
  if (!a.has("cpu_checkpointing")) return;
  a.boolean("cpu_checkpointing", std::nullopt);
  if (!top.has("parallel") || !top.raw("parallel").is_object()) return;
  const Json& mine = top.raw("parallel");
  if (mine.contains("cpu_checkpointing") && mine.at("cpu_checkpointing") != a.raw("cpu_checkpointing"))
    TANDEM_FAIL("parallel.cpu_checkpointing ", show(mine.at("cpu_checkpointing")),
                " and DeepSpeed's activation_checkpointing.cpu_checkpointing ", show(a.raw("cpu_checkpointing")),
                " disagree: keep one of them");
}

// DeepSpeed's sequence_parallel_size (Ulysses) is parallel.context: written there and removed. Both given must agree.
void rewrite_sequence_parallel(Json& cfg) {
  Fields top(cfg, "");
  if (!top.has("sequence_parallel_size")) return;
  const int64_t size = read_setting(top, "sequence_parallel_size").get<int64_t>();
  cfg.erase("sequence_parallel_size");
  if (size == 1) return;
  if (!top.has("parallel")) top.raw("parallel") = Json::object();
  Json& par = top.raw("parallel");
  if (!par.is_object())
    TANDEM_FAIL("sequence_parallel_size ", size, " with \"parallel\": ", par.dump(),
                ": the planner does not choose context parallelism yet; give the layout as an object with ",
                "\"context\": ", size);
  if (par.contains("context") && par["context"] != Json(size))
    TANDEM_FAIL("sequence_parallel_size ", size, " and parallel.context ", par["context"].dump(),
                " disagree: they are one setting (DeepSpeed's name and Tandem's); keep one");
  par["context"] = size;
}

// DeepSpeed's AutoEP (expert_parallel.enabled with autoep_size) is parallel.expert: written there. Both given must
// agree.
void rewrite_expert_parallel(Json& cfg) {
  if (!cfg.contains("expert_parallel") || !cfg.at("expert_parallel").is_object()) return;
  const Json& ep = cfg.at("expert_parallel");
  if (ep.contains("enabled") && !ep.at("enabled").is_boolean())
    TANDEM_FAIL("expert_parallel.enabled must be true or false, got ", show(ep.at("enabled")));
  if (!ep.value("enabled", false)) return;
  const std::optional<int64_t> size = ep.contains("autoep_size") ? as_integer(ep.at("autoep_size")) : std::nullopt;
  if (!size || *size < 1)
    TANDEM_FAIL(
        "expert_parallel.enabled needs expert_parallel.autoep_size, a positive integer (the ranks each "
        "layer's experts are spread over; Tandem's parallel.expert), got ",
        ep.contains("autoep_size") ? show(ep.at("autoep_size")) : std::string("none"));
  if (!cfg.contains("parallel")) cfg["parallel"] = Json::object();
  Json& par = cfg["parallel"];
  if (!par.is_object())
    TANDEM_FAIL(
        "expert_parallel.autoep_size ", *size, " with \"parallel\": ", par.dump(),
        ": the planner does not choose expert parallelism yet; give the layout as an object with \"expert\": ", *size);
  if (par.contains("expert") && par["expert"] != Json(*size))
    TANDEM_FAIL("expert_parallel.autoep_size ", *size, " and parallel.expert ", par["expert"].dump(),
                " disagree: they are one setting (DeepSpeed's name and Tandem's); keep one");
  par["expert"] = *size;
}

// DeepSpeed's "tensorboard" and "csv_monitor": {"enabled", "output_path", "job_name"}, with DeepSpeed's defaults
// (the rows'; output_path "" here means the run folder).
void validate_monitor(Fields& top, const std::string& name) {
  Fields m(top.object(name), name);
  m.only(setting_keys(name));
  read_setting(m, "enabled");
  if (!read_setting(m, "output_path").is_string())
    m.fail_type("output_path", "a folder name, or \"\" for the run folder");
  const std::string job = read_setting(m, "job_name").get<std::string>();
  if (job.find('/') != std::string::npos || job == "." || job == "..")
    TANDEM_FAIL(name, ".job_name '", job, "' must name one folder (inside output_path): use a name without '/'");
}

}  // namespace

void validate_parallel(Fields& top) {
  if (!top.has("parallel")) return;
  Json& par = top.raw("parallel");
  if (par.is_string()) {
    if (par.get<std::string>() != "auto") top.fail_type("parallel", "\"auto\" or an object {...}");
    return;
  }
  if (!par.is_object()) top.fail_type("parallel", "\"auto\" or an object {...}");
  Fields p(par, "parallel");
  p.only(setting_keys("parallel"));
  // Only names and types: the layout code (layout::resolve_parallel) decides defaults and how the values combine.
  for (const std::string& key : setting_keys("parallel"))
    if (key != "stages" && p.has(key)) read_setting(p, key);
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

Json validate(Json cfg, std::vector<std::string>& no_effect) {
  no_effect.clear();
  Fields top(cfg, "");
  resolve_auto(cfg);
  only_with_deepspeed(top, setting_keys(""), no_effect, {}, "", {kAutoRecord});
  for (const char* key : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"})
    if (top.has(key)) read_setting(top, key);
  const int64_t steps = read_setting(top, "steps").get<int64_t>();
  read_setting(top, "seed");
  read_setting(top, "steps_per_print");
  const double lr = default_lr(cfg);
  validate_optimizer(top.object("optimizer"), lr, no_effect);
  validate_scheduler(top.object("scheduler"), steps, no_effect);
  read_setting(top, "gradient_clipping");
  validate_precision(top, no_effect);
  validate_model(top);
  validate_lora(cfg, top.raw("model")["type"].get<std::string>());
  validate_fp8(top);
  validate_tiles(top);
  const Json& zero = cfg.at("zero_optimization");
  if (cfg.contains("lora") &&
      (zero.at("offload_optimizer").at("device") != "none" || zero.at("offload_param").at("device") != "none"))
    TANDEM_FAIL(
        "\"lora\" with zero_optimization.offload_optimizer or offload_param is not supported: under LoRA only the "
        "adapters train, so the optimizer state is a few bytes per adapter parameter and nothing is worth "
        "offloading, and the frozen base stays on the device in the compute dtype; remove the offload keys");
  validate_data(top);
  validate_eval(top);
  rewrite_sequence_parallel(cfg);
  rewrite_expert_parallel(cfg);
  validate_parallel(top);
  validate_cpu_checkpointing(top);
  Fields c(top.object("checkpoint"), "checkpoint");
  only_with_deepspeed(c, setting_keys("checkpoint"), no_effect);
  for (const std::string& k : setting_keys("checkpoint")) read_setting(c, k);
  validate_monitor(top, "tensorboard");
  validate_monitor(top, "csv_monitor");
  validate_memory_size(top, "device_memory");
  validate_memory_size(top, "host_memory");
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
