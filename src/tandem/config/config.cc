// Reading a config file (refusing repeated keys), applying "a.b=value" overrides, and the typed TrainConfig
// view with the lines to tell the user once. The schema (keys, types, defaults) is in schema.cc and batch
// arithmetic in batch.cc.
#include "tandem/config/config.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "tandem/config/auto_values.h"
#include "tandem/config/fields.h"
#include "tandem/config/hf_config.h"
#include "tandem/config/lora_config.h"
#include "tandem/config/settings.h"
#include "tandem/core/error.h"

namespace tandem::config {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TANDEM_FAIL("cannot open config file '", path, "': check the path (", std::strerror(errno), ")");
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) TANDEM_FAIL("cannot read config file '", path, "'");
  return os.str();
}

// nlohmann reports a byte position; people want a line and column.
std::string position(const std::string& text, size_t byte) {
  const size_t end = std::min(byte == 0 ? 0 : byte - 1, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n')
      ++line, column = 1;
    else
      ++column;
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

std::vector<std::string> split_key(const std::string& key, const std::string& assignment) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t dot = key.find('.', begin);
    parts.push_back(key.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin));
    if (parts.back().empty()) TANDEM_FAIL("override '", assignment, "' has an empty key part: write it as a.b.c=value");
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  return parts;
}

// The validated "model" object as its family's struct.
LlamaConfig llama_config(const Json& m) {
  LlamaConfig c;
  c.vocab_size = m.at("vocab_size").get<int64_t>();
  c.seq_len = m.at("seq_len").get<int64_t>();
  c.hidden_size = m.at("hidden_size").get<int64_t>();
  c.intermediate_size = m.at("intermediate_size").get<int64_t>();
  c.num_hidden_layers = m.at("num_hidden_layers").get<int64_t>();
  c.num_attention_heads = static_cast<int>(m.at("num_attention_heads").get<int64_t>());
  c.num_key_value_heads = static_cast<int>(m.at("num_key_value_heads").get<int64_t>());
  c.head_dim = m.at("head_dim").get<int64_t>();
  c.max_position_embeddings = m.at("max_position_embeddings").get<int64_t>();
  c.rms_norm_eps = m.at("rms_norm_eps").get<double>();
  c.rope_theta = m.at("rope_theta").get<double>();
  if (const Json& r = m.at("rope_scaling"); !r.is_null()) {
    c.rope_scaling.type = RopeType::Llama3;  // the only rope_type validate() accepts
    c.rope_scaling.factor = r.at("factor").get<double>();
    c.rope_scaling.low_freq_factor = r.at("low_freq_factor").get<double>();
    c.rope_scaling.high_freq_factor = r.at("high_freq_factor").get<double>();
    c.rope_scaling.original_max_position_embeddings = r.at("original_max_position_embeddings").get<int64_t>();
  }
  c.tie_word_embeddings = m.at("tie_word_embeddings").get<bool>();
  c.attention_bias = m.at("attention_bias").get<bool>();
  c.qkv_bias = m.at("qkv_bias").get<bool>();
  // A model saved before "family" existed (an older checkpoint's config) was Qwen2's when it had qkv_bias.
  c.family = spec::family_named(m.value("family", c.qkv_bias ? "qwen2" : "llama")).value_or(spec::LlamaFamily::Llama);
  if (const auto w = m.find("sliding_window"); w != m.end() && !w->is_null()) c.sliding_window = w->get<int64_t>();
  c.use_sliding_window = m.value("use_sliding_window", false);
  c.max_window_layers = m.value("max_window_layers", c.max_window_layers);
  if (m.contains("num_experts")) {
    spec::MoeConfig& e = c.moe;
    e.num_experts = static_cast<int>(m.at("num_experts").get<int64_t>());
    e.num_experts_per_tok = static_cast<int>(m.at("num_experts_per_tok").get<int64_t>());
    e.moe_intermediate_size = m.at("moe_intermediate_size").get<int64_t>();
    e.norm_topk_prob = m.at("norm_topk_prob").get<bool>();
    e.decoder_sparse_step = m.at("decoder_sparse_step").get<int64_t>();
    for (const Json& i : m.at("mlp_only_layers")) e.mlp_only_layers.push_back(as_integer(i).value_or(-1));
    e.router_aux_loss_coef = m.at("router_aux_loss_coef").get<double>();
    e.output_router_logits = m.at("output_router_logits").get<bool>();
    e.shared_expert_intermediate_size = m.value("shared_expert_intermediate_size", int64_t{0});
  }
  return c;
}

// "parallel": "auto", the only string validate_parallel takes: the planner chooses the layout.
bool planned(const Json& parallel) { return parallel.is_string(); }

}  // namespace

ModelConfig model_config(const Json& m) {
  if (m.at("type") == "llama") return llama_config(m);
  if (m.at("type") == "gpt") {
    GptConfig g;
    g.vocab_size = m.at("vocab_size").get<int64_t>();
    g.seq_len = m.at("seq_len").get<int64_t>();
    g.dim = m.at("dim").get<int64_t>();
    g.layers = m.at("layers").get<int64_t>();
    g.heads = static_cast<int>(m.at("heads").get<int64_t>());
    g.tie_word_embeddings = m.at("tie_word_embeddings").get<bool>();
    return g;
  }
  MlpConfig c;
  for (const Json& width : m.at("sizes")) c.sizes.push_back(as_integer(width).value_or(0));
  c.activation = m.at("activation").get<std::string>();
  return c;
}

ParallelConfig parallel_config(const Json& parallel) {
  if (parallel.is_null()) return {};
  // Checked by the rows (validate_parallel), as validate() checks a config's, and read through their fields; only the
  // string form is read here.
  Json cfg = {{"parallel", parallel}};
  Fields top(cfg, "");
  validate_parallel(top);
  spec::TrainConfig run;
  write_settings(cfg, "parallel", run);
  run.parallel.planned = planned(parallel);
  return run.parallel;
}

void apply_override(Json& cfg, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos)
    TANDEM_FAIL("override '", assignment, "' has no '=': write it as key.path=value, e.g. optimizer.params.lr=3e-4");
  const std::vector<std::string> parts = split_key(assignment.substr(0, eq), assignment);
  const std::string text = assignment.substr(eq + 1);
  // Anything that is not valid JSON is meant as a string, so optimizer.type=AdamW needs no quotes.
  Json value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;

  if (cfg.is_null()) cfg = Json::object();
  Json* node = &cfg;
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (i ? "." : "") + parts[i];
    if (!node->is_object())
      TANDEM_FAIL("override '", assignment, "': cannot set a key inside '", walked.substr(0, walked.rfind('.')),
                  "', which is ", show(*node), ", not an object");
    Json& next = (*node)[parts[i]];
    if (next.is_null()) next = Json::object();
    if (!next.is_object())
      TANDEM_FAIL("override '", assignment, "': '", walked, "' is ", show(next), ", not an object, so it has no key '",
                  parts[i + 1], "'");
    node = &next;
  }
  if (!node->is_object()) TANDEM_FAIL("override '", assignment, "': the config is ", show(*node), ", not an object");
  (*node)[parts.back()] = std::move(value);
}

Json parse_config_text(const std::string& text, const std::string& source) {
  // The parser reports each object's keys as it meets them; a stack of open objects and arrays gives the
  // dotted path of each (array elements as [i]).
  struct Open {
    bool object;
    std::string path;
    std::set<std::string> keys;
    std::string key;   // the object's latest key
    size_t index = 0;  // the array's next element
  };
  std::vector<Open> open;
  const auto inner_path = [&]() -> std::string {
    if (open.empty()) return "";
    const Open& o = open.back();
    if (o.object) return o.path.empty() ? o.key : o.path + "." + o.key;
    return o.path + "[" + std::to_string(o.index) + "]";
  };
  const auto element_done = [&] {
    if (!open.empty() && !open.back().object) ++open.back().index;
  };
  const Json::parser_callback_t track = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        open.push_back({event == Json::parse_event_t::object_start, inner_path(), {}, "", 0});
        break;
      case Json::parse_event_t::key:
        open.back().key = parsed.get<std::string>();
        if (!open.back().keys.insert(open.back().key).second)
          TANDEM_FAIL(source, ": key '", inner_path(),
                      "' appears twice in the same object; JSON readers keep only the last, so remove one of them");
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        open.pop_back();
        element_done();
        break;
      case Json::parse_event_t::value:
        element_done();
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, track, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    std::string detail = e.what();
    const size_t syntax = detail.find("syntax error");
    if (syntax != std::string::npos) detail = detail.substr(syntax);
    TANDEM_FAIL(source, " is not valid JSON: ", position(text, e.byte), ": ", detail);
  }
}

Json load_config(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = read_file(path);
  Json cfg = parse_config_text(text, "config file '" + path + "'");
  if (!cfg.is_object()) TANDEM_FAIL("config file '", path, "' must hold a JSON object {...}, got ", show(cfg));
  for (const auto& o : overrides) apply_override(cfg, o);
  try {
    return validate(std::move(cfg));
  } catch (const Error& e) {
    TANDEM_FAIL("config file '", path, "'", overrides.empty() ? "" : " (with overrides)", ": ", e.what());
  }
}

TrainConfig parse(const Json& validated_cfg) {
  // validate() is idempotent and cheap; running it again keeps parse() safe on a hand-built config.
  std::vector<std::string> no_effect;
  const Json cfg = validate(validated_cfg, no_effect);
  TrainConfig tc;
  // Each key the settings table binds to a field (settings_rows.cc), the batch keys and the layout's among them; what
  // is left here joins keys or is read by code of its own: the model, LoRA and "parallel": "auto".
  write_settings(cfg, "", tc);
  // A Constant schedule has no params; without a peak or an end, the optimizer's lr and the run's steps.
  const Json& sp = cfg.at("scheduler").at("params");
  if (!sp.contains("warmup_max_lr")) tc.scheduler.peak_lr = tc.optimizer.lr;
  if (!sp.contains("total_num_steps")) tc.scheduler.total_num_steps = tc.steps;

  tc.model = model_config(cfg.at("model"));
  tc.pretrained_dir = cfg.at("model").value("from_pretrained", "");
  if (!tc.pretrained_dir.empty()) {
    Json pretrained = cfg.at("model");  // validated already: this only collects the warnings about its config.json
    expand_from_pretrained(pretrained, &tc.pretrained_notices);
  }
  tc.lora = lora_config(cfg);
  tc.eval.enabled = cfg.contains("eval");
  tc.parallel.planned = planned(cfg.value("parallel", Json()));
  // DeepSpeed's spelling of parallel.cpu_checkpointing (schema.cc has checked that the two agree).
  if (cfg.contains("activation_checkpointing") && cfg.at("activation_checkpointing").is_object() &&
      cfg.at("activation_checkpointing").value("cpu_checkpointing", false))
    tc.parallel.cpu_checkpointing = true;
  tc.raw = cfg;
  tc.raw.erase(kAutoRecord);
  if (cfg.contains(kAutoRecord)) tc.auto_resolved = cfg.at(kAutoRecord).get<std::vector<std::string>>();
  tc.no_effect_keys = no_effect;
  return tc;
}

TrainConfig parse(const Json& validated_cfg, int64_t dp) {
  TrainConfig tc = parse(validated_cfg);
  set_data_parallel(tc, dp);
  return tc;
}

void set_data_parallel(TrainConfig& tc, int64_t dp) {
  tc.batch = resolve_batch(tc.batch_config, dp);
  tc.data_parallel = dp;
  tc.notices = tc.pretrained_notices;
  if (!tc.raw.is_object()) return;  // a TrainConfig made in code, not by parse()
  Json cfg = tc.raw;
  if (!tc.auto_resolved.empty()) cfg[kAutoRecord] = tc.auto_resolved;
  const std::string autos = auto_line(cfg, tc.batch);
  if (!autos.empty()) tc.notices.push_back(autos);
  if (!tc.no_effect_keys.empty()) {
    std::string line = "warning: these DeepSpeed keys have no effect in Tandem:";
    for (size_t i = 0; i < tc.no_effect_keys.size(); ++i) line += (i ? ", " : " ") + tc.no_effect_keys[i];
    tc.notices.push_back(line + " (docs/deepspeed.md)");
  }
  // As in DeepSpeed, a warmup schedule's warmup_max_lr is the peak and the optimizer's own rate goes unused.
  const Json& sp = cfg.at("scheduler").at("params");
  if (sp.contains("warmup_max_lr") && tc.scheduler.peak_lr != tc.optimizer.lr)
    tc.notices.push_back("warning: optimizer.params.lr (" + show(cfg.at("optimizer").at("params").at("lr")) +
                         ") is not used: " + "scheduler.params.warmup_max_lr (" + show(sp.at("warmup_max_lr")) +
                         ") is the schedule's peak, as in DeepSpeed");
}

}  // namespace tandem::config
