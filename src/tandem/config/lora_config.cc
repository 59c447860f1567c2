// The "lora" object and PEFT's adapter_config.json (lora_config.h): keys, defaults, what Tandem refuses and why.
#include "tandem/config/lora_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include "tandem/config/fields.h"
#include "tandem/config/settings.h"
#include "tandem/core/error.h"

namespace tandem::config {
namespace {

namespace fs = std::filesystem;

constexpr const char* kAllLinear = "all-linear";

// True for the values PEFT writes when a feature is off: null, false, {}, [], "".
bool unset(const Json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_object() || v.is_array()) && v.empty()) ||
         (v.is_string() && v.get<std::string>().empty());
}

// adapter_config.json keys that say nothing about what the adapter computes, or matter only with a feature whose own
// key must be off.
const std::set<std::string>& inert_adapter_keys() {
  static const std::set<std::string> keys = {"base_model_name_or_path",
                                             "revision",
                                             "inference_mode",
                                             "peft_version",
                                             "auto_mapping",
                                             "task_type",
                                             "peft_type",
                                             "fan_in_fan_out",     // Tandem knows each module's layout (GPT-2's Conv1D)
                                             "init_lora_weights",  // the weights come from the file
                                             "megatron_core",
                                             "qalora_group_size",
                                             "ensure_weight_tying"};
  return keys;
}

// Why a PEFT feature that changes what is trained is refused; "" for keys without a reason of their own.
std::string peft_refusal(const std::string& key) {
  if (key == "use_dora") return "DoRA adapters are not supported: Tandem trains plain LoRA";
  if (key == "modules_to_save") return "training whole modules beside the adapters is not supported";
  if (key == "rank_pattern" || key == "alpha_pattern")
    return "per-module ranks and alphas are not supported: every adapter has the same r and lora_alpha";
  if (key == "layers_to_transform" || key == "layers_pattern")
    return "adapters on a subset of the layers are not supported: target whole module names";
  if (key == "lora_bias") return "a trainable bias on lora_B is not supported";
  if (key == "exclude_modules") return "exclude_modules is not supported: list the target_modules to adapt instead";
  if (key == "trainable_token_indices") return "trainable token embeddings are not supported";
  if (key == "use_qalora") return "QA-LoRA is not supported";
  return "";
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The Tandem "lora" keys an adapter folder decides, read from its adapter_config.json, with everything that would make
// it compute something else refused by name.
Json read_adapter_config(const std::string& dir) {
  const fs::path file = fs::path(dir) / "adapter_config.json";
  if (!fs::is_directory(dir))
    TANDEM_FAIL("lora.from_pretrained '", dir, "' is not a folder: name a PEFT adapter folder (adapter_config.json ",
                "and adapter_model.safetensors, as save_pretrained writes)");
  if (!fs::exists(file))
    TANDEM_FAIL("lora.from_pretrained '", dir, "' has no adapter_config.json: is it a PEFT adapter folder ",
                "(PeftModel.save_pretrained writes one)?");
  if (!fs::exists(fs::path(dir) / "adapter_model.safetensors"))
    TANDEM_FAIL("lora.from_pretrained '", dir, "' has no adapter_model.safetensors",
                fs::exists(fs::path(dir) / "adapter_model.bin")
                    ? ": it holds adapter_model.bin, which Tandem does not read; save it again with "
                      "save_pretrained(..., safe_serialization=True)"
                    : "");
  const Json a = Json::parse(read_text(file), nullptr, /*allow_exceptions=*/false);
  if (a.is_discarded() || !a.is_object()) TANDEM_FAIL("adapter config '", file.string(), "' is not a JSON object");
  const std::string where = "adapter config '" + file.string() + "'";
  const std::string type = a.value("peft_type", std::string());
  if (type != "LORA")
    TANDEM_FAIL(where, ": peft_type is ", a.contains("peft_type") ? show(a.at("peft_type")) : "missing",
                "; Tandem reads LoRA adapters (\"peft_type\": \"LORA\")");
  if (a.contains("task_type") && !a.at("task_type").is_null() && a.at("task_type") != "CAUSAL_LM")
    TANDEM_FAIL(where, ": task_type ", show(a.at("task_type")),
                " is not a causal language model's; Tandem trains CAUSAL_LM adapters");
  const std::set<std::string> used = {"r",          "lora_alpha", "lora_dropout",     "target_modules",
                                      "use_rslora", "bias",       "target_parameters"};
  for (const auto& [key, value] : a.items()) {
    if (used.count(key) || inert_adapter_keys().count(key) || unset(value)) continue;
    const std::string why = peft_refusal(key);
    TANDEM_FAIL(where, " sets ", key, " to ", show(value), ": ",
                why.empty() ? "Tandem's LoRA does not support it" : why,
                "; Tandem continues adapters of PEFT's plain LoRA");
  }
  Json out = Json::object();
  for (const char* key : {"r", "lora_alpha", "target_modules"}) {
    if (!a.contains(key) || a.at(key).is_null()) TANDEM_FAIL(where, " has no ", key);
    out[key] = a.at(key);
  }
  out["lora_dropout"] = a.value("lora_dropout", 0.0);
  out["use_rslora"] = a.value("use_rslora", false);
  out["bias"] = a.value("bias", std::string("none"));
  out["target_parameters"] = unset(a.value("target_parameters", Json())) ? Json::array() : a.at("target_parameters");
  return out;
}

// A target list as a set (PEFT writes a set, in no fixed order), or the one string.
Json normalised_targets(const Json& t) {
  if (!t.is_array()) return t;
  std::vector<std::string> names;
  for (const Json& n : t)
    if (n.is_string()) names.push_back(n.get<std::string>());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// "from_pretrained": DIR: the adapter's own r, lora_alpha, target_modules, target_parameters ([] where it has none),
// use_rslora and bias; lora_dropout from the config when given there (it changes training noise only, not what the
// adapter computes).
void expand_from_adapter(Json& lora) {
  const Json& from = lora.at("from_pretrained");
  if (!from.is_string() || from.get<std::string>().empty())
    TANDEM_FAIL("config key 'lora.from_pretrained' is ", show(from),
                ", not a folder name: give a PEFT adapter folder, e.g. \"from_pretrained\": \"my-adapter\"");
  const std::string dir = from.get<std::string>();
  const Json adapter = read_adapter_config(dir);
  for (const char* key : {"r", "lora_alpha", "target_modules", "use_rslora", "bias", "target_parameters"}) {
    const Json& theirs = adapter.at(key);
    if (lora.contains(key)) {
      const std::string k = key;
      const bool same = k == "target_modules" || k == "target_parameters"
                            ? normalised_targets(lora.at(key)) == normalised_targets(theirs)
                            : lora.at(key) == theirs;
      if (!same)
        TANDEM_FAIL("config key 'lora.", key, "' is ", show(lora.at(key)), " but lora.from_pretrained '", dir,
                    "' says ", show(theirs), ": the adapter's own value is used; remove lora.", key,
                    " or start a fresh adapter without from_pretrained");
    }
    lora[key] = theirs;
  }
  if (!lora.contains("lora_dropout")) lora["lora_dropout"] = adapter.at("lora_dropout");
}

// target_parameters: a list of non-empty names ([] is none); which parameters they select is decided with the model
// (interchange/peft_names.h). PEFT's ParamWrapper folds the adapter into the weight, so no mask can fall on the
// adapter's input alone, and it raises for any lora_dropout: so is it refused beside them here.
bool check_target_parameters(Fields& l, double dropout) {
  const Json& t = read_setting(l, "target_parameters", Json::array());
  bool ok = t.is_array();
  for (size_t i = 0; ok && i < t.size(); ++i) ok = t[i].is_string() && !t[i].get<std::string>().empty();
  if (!ok)
    l.fail_type("target_parameters",
                "a list of a mixture of experts' parameter names (e.g. [\"mlp.experts.gate_up_proj\", "
                "\"mlp.experts.down_proj\"])");
  if (!t.empty() && dropout > 0)
    TANDEM_FAIL("config key 'lora.lora_dropout' is ", dropout,
                " beside lora.target_parameters: the experts' adapters take no dropout (PEFT refuses it there too); "
                "set \"lora_dropout\": 0");
  return !t.empty();
}

// target_modules: a list (empty only beside target_parameters, as PEFT's target_modules=[]), "all-linear" or a
// regular expression.
void check_targets(Fields& l, const std::string& model_type, bool parameters) {
  const Json& t = read_setting(l, "target_modules", Json(default_lora_targets(model_type)));
  if (t.is_string()) {
    const std::string pattern = t.get<std::string>();
    if (pattern.empty())
      l.fail_type("target_modules", "a list of module names, \"all-linear\" or a regular expression");
    if (pattern == kAllLinear) return;
    try {
      const std::regex compiled(pattern);
      (void)compiled;
    } catch (const std::regex_error& e) {
      TANDEM_FAIL("config key 'lora.target_modules' \"", pattern,
                  "\" is neither \"all-linear\" nor a valid regular expression (", e.what(),
                  "): give a list of module names such as [\"q_proj\", \"v_proj\"]");
    }
    return;
  }
  bool ok = t.is_array() && (!t.empty() || parameters);
  for (size_t i = 0; ok && i < t.size(); ++i) ok = t[i].is_string() && !t[i].get<std::string>().empty();
  if (!ok)
    l.fail_type("target_modules",
                "a non-empty list of module names (e.g. [\"q_proj\", \"v_proj\"]; [] only beside "
                "target_parameters), \"all-linear\" or a regular expression");
}

}  // namespace

std::vector<std::string> default_lora_targets(const std::string& model_type) {
  if (model_type == "gpt") return {"c_attn"};
  return {"q_proj", "v_proj"};
}

void validate_lora(Json& cfg, const std::string& model_type) {
  if (!cfg.contains("lora")) return;
  if (cfg.at("lora").is_null()) {
    cfg.erase("lora");
    return;
  }
  Fields l(cfg["lora"], "lora");
  l.only(setting_keys("lora"));
  if (model_type != "gpt" && model_type != "llama")
    TANDEM_FAIL("\"lora\" adapts a decoder's projections, which model type '", model_type,
                "' does not have: use a gpt or llama model, or remove \"lora\"");
  if (l.has("from_pretrained")) expand_from_adapter(cfg["lora"]);
  read_setting(l, "r");
  read_setting(l, "lora_alpha");
  const double dropout = read_setting(l, "lora_dropout").get<double>();
  if (dropout >= 1.0)
    TANDEM_FAIL("config key 'lora.lora_dropout' is ", dropout,
                ": it is the probability of dropping an adapter's input element, below 1 (PEFT's default 0)");
  check_targets(l, model_type, check_target_parameters(l, dropout));
  read_setting(l, "use_rslora");
  if (l.has("bias") && l.raw("bias").is_string() && l.raw("bias") != "none")
    TANDEM_FAIL("config key 'lora.bias' is ", show(l.raw("bias")),
                ": Tandem trains the adapters alone and keeps every bias of the base model frozen; set \"bias\": "
                "\"none\" (PEFT's default)");
  read_setting(l, "bias");
  const Json& init = read_setting(l, "init_lora_weights");
  if (!init.is_boolean() && !(init.is_string() && init.get<std::string>() == "gaussian"))
    TANDEM_FAIL("config key 'lora.init_lora_weights' is ", show(init),
                ": Tandem initialises adapters as PEFT does for true (A kaiming-uniform, B zeros), false (both as "
                "torch's nn.Linear) and \"gaussian\" (A normal with std 1/r, B zeros); start from a PEFT adapter "
                "folder (lora.from_pretrained) for other initialisations");
  if (l.has("task_type") && l.raw("task_type") != "CAUSAL_LM")
    TANDEM_FAIL("config key 'lora.task_type' is ", show(l.raw("task_type")),
                ": Tandem trains causal language models; use \"CAUSAL_LM\" or remove it");
}

spec::LoraConfig lora_config(const Json& cfg) {
  spec::TrainConfig run;
  if (!cfg.contains("lora")) return run.lora;
  write_settings(cfg, "lora", run);  // the keys the settings table binds: r, lora_alpha, lora_dropout, ...
  spec::LoraConfig& c = run.lora;
  const Json& l = cfg.at("lora");
  c.enabled = true;
  const Json& t = l.at("target_modules");
  if (t.is_string() && t.get<std::string>() != kAllLinear)
    c.target_regex = t.get<std::string>();
  else if (t.is_string())
    c.target_modules = {kAllLinear};
  else
    c.target_modules = t.get<std::vector<std::string>>();
  c.target_parameters = l.value("target_parameters", Json::array()).get<std::vector<std::string>>();
  const Json& init = l.at("init_lora_weights");
  c.init = init.is_string()   ? spec::LoraInit::Gaussian
           : init.get<bool>() ? spec::LoraInit::Default
                              : spec::LoraInit::Random;
  return c;
}

}  // namespace tandem::config
