// Hugging Face config.json <-> Tandem's model object (hf_config.h).
#include "tandem/config/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <variant>

#include "tandem/config/fields.h"
#include "tandem/core/error.h"

namespace tandem::config {
namespace {

// Tandem's LayerNorm epsilon (nn/layernorm.h) and the GELU its op computes (tanh approximation).
constexpr double kLayerNormEps = 1e-5;

const std::vector<std::string>& supported() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = {"GPT2LMHeadModel"};
    for (const spec::LlamaFamilyNames& f : spec::kLlamaFamilies) out.push_back(f.architecture);
    return out;
  }();
  return names;
}

// Keys of every Hugging Face config that say nothing about the computation Tandem trains.
const std::set<std::string>& inert_keys() {
  static const std::set<std::string> keys = {"_name_or_path",
                                             "architectures",
                                             "model_type",
                                             "torch_dtype",
                                             "dtype",
                                             "transformers_version",
                                             "bos_token_id",
                                             "eos_token_id",
                                             "pad_token_id",
                                             "sep_token_id",
                                             "decoder_start_token_id",
                                             "use_cache",
                                             "initializer_range",
                                             "output_hidden_states",
                                             "output_attentions",
                                             "return_dict",
                                             "id2label",
                                             "label2id",
                                             "problem_type",
                                             "chunk_size_feed_forward",
                                             "is_encoder_decoder",
                                             "is_decoder",
                                             "tokenizer_class",
                                             "task_specific_params",
                                             "prefix",
                                             "finetuning_task",
                                             "max_length",
                                             "use_return_dict",
                                             "tf_legacy_loss",
                                             "pruned_heads",
                                             "torchscript",
                                             "_attn_implementation_autoset"};
  return keys;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

class HfReader {
 public:
  HfReader(const Json& hf, const std::string& dir, const std::string& arch)
      : hf_(hf),
        where_("Hugging Face config '" + (std::filesystem::path(dir) / "config.json").string() + "' (" + arch + ")") {}

  bool has(const std::string& key) {
    used_.insert(key);
    return hf_.contains(key) && !hf_.at(key).is_null();
  }
  // Written in the file, null or not.
  bool present(const std::string& key) {
    used_.insert(key);
    return hf_.contains(key);
  }
  const Json& at(const std::string& key) {
    used_.insert(key);
    return hf_.at(key);
  }
  int64_t integer(const std::string& key, std::optional<int64_t> def = std::nullopt) {
    if (!has(key)) {
      if (!def) fail("has no '", key, "'");
      return *def;
    }
    const std::optional<int64_t> v = as_integer(hf_.at(key));
    if (!v || *v < 1) fail("'", key, "' is ", show(hf_.at(key)), ", not a positive integer");
    return *v;
  }
  double number(const std::string& key, double def) {
    if (!has(key)) return def;
    if (!hf_.at(key).is_number()) fail("'", key, "' is ", show(hf_.at(key)), ", not a number");
    return hf_.at(key).get<double>();
  }
  bool boolean(const std::string& key, bool def) {
    if (!has(key)) return def;
    if (!hf_.at(key).is_boolean()) fail("'", key, "' is ", show(hf_.at(key)), ", not true or false");
    return hf_.at(key).get<bool>();
  }
  std::string string(const std::string& key, const std::string& def) {
    if (!has(key)) return def;
    if (!hf_.at(key).is_string()) fail("'", key, "' is ", show(hf_.at(key)), ", not a string");
    return hf_.at(key).get<std::string>();
  }
  // Dropout is a regulariser Tandem does not apply: a nonzero rate is reported, not refused.
  void dropout(const std::vector<std::string>& keys) {
    for (const std::string& k : keys)
      if (has(k) && hf_.at(k).is_number() && hf_.at(k).get<double>() != 0) dropped_.push_back(k);
  }

  template <class... Args>
  [[noreturn]] void fail(Args&&... args) const {
    TANDEM_FAIL(where_, " ", std::forward<Args>(args)...);
  }
  template <class... Args>
  [[noreturn]] void cannot(Args&&... args) const {
    TANDEM_FAIL(where_, ": Tandem cannot train this model: ", std::forward<Args>(args)...);
  }

  void warn(std::vector<std::string>* warnings) const {
    if (!warnings) return;
    std::vector<std::string> unknown;
    for (const auto& [key, value] : hf_.items())
      if (!used_.count(key) && !inert_keys().count(key)) unknown.push_back(key);
    if (!unknown.empty())
      warnings->push_back("warning: " + where_ + ": Tandem does not read these keys: " + join(unknown));
    if (!dropped_.empty())
      warnings->push_back("warning: " + where_ + ": Tandem trains without dropout; ignored: " + join(dropped_));
  }

 private:
  const Json& hf_;
  std::string where_;
  std::set<std::string> used_;
  std::vector<std::string> dropped_;
};

Json gpt2_model(HfReader& r) {
  const std::string act = r.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    r.cannot("activation_function \"", act,
             "\": its GELU is the tanh approximation (gelu_new, gelu_pytorch_tanh) and nothing else");
  const int64_t dim = r.integer("n_embd");
  if (r.has("n_inner") && r.integer("n_inner") != 4 * dim)
    r.cannot("n_inner ", show(r.at("n_inner")), ": its MLP is 4 * n_embd = ", 4 * dim, " wide");
  const double eps = r.number("layer_norm_epsilon", 1e-5);
  if (std::abs(eps - kLayerNormEps) > 1e-12)
    r.cannot("layer_norm_epsilon ", eps, ": its LayerNorm uses ", kLayerNormEps);
  if (r.boolean("scale_attn_by_inverse_layer_idx", false))
    r.cannot("scale_attn_by_inverse_layer_idx is true: its attention is scaled by 1/sqrt(head dim) only");
  if (r.boolean("reorder_and_upcast_attn", false))
    r.cannot("reorder_and_upcast_attn is true: that attention variant is not implemented");
  if (!r.boolean("scale_attn_weights", true))
    r.cannot("scale_attn_weights is false: its attention always scales by 1/sqrt(head dim)");
  if (r.boolean("add_cross_attention", false)) r.cannot("add_cross_attention is true: it has no cross-attention");
  r.dropout({"resid_pdrop", "embd_pdrop", "attn_pdrop"});
  for (const char* k : {"summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                        "summary_first_dropout", "n_ctx"})
    r.has(k);  // GPT2DoubleHeadsModel's heads and an old alias of n_positions: nothing to train here
  Json m = {{"type", "gpt"},
            {"vocab_size", r.integer("vocab_size")},
            {"dim", dim},
            {"layers", r.integer("n_layer")},
            {"heads", r.integer("n_head")},
            {"tie_word_embeddings", r.boolean("tie_word_embeddings", true)}};
  r.integer("n_positions", 1024);  // checked against seq_len where the weights are read
  return m;
}

// One rope description (rope_parameters, or the legacy rope_scaling) as transformers 5 completes it: "type" read as
// "rope_type", the type "default" when absent, rope_theta from the top level when absent (10000 without one), and
// for llama3 original_max_position_embeddings from max_position_embeddings when absent.
Json completed_rope(Json rope, double top_theta, int64_t max_positions) {
  if (rope.contains("type") && !rope.contains("rope_type")) rope["rope_type"] = rope["type"];
  rope.erase("type");
  if (!rope.contains("rope_type")) rope["rope_type"] = "default";
  if (!rope.contains("rope_theta")) rope["rope_theta"] = top_theta;
  if (rope["rope_type"] == "llama3" && !rope.contains("original_max_position_embeddings"))
    rope["original_max_position_embeddings"] = max_positions;
  return rope;
}

// rope_theta and rope_scaling for Tandem's model. transformers 5 keeps both in rope_parameters; older files have
// rope_theta and rope_scaling apart. A file with both rope_parameters and a rope_scaling is read by transformers 5
// from rope_scaling alone (it replaces rope_parameters), by a reader of the new key from rope_parameters: when the two
// say different things, the file describes two models, and it is refused naming both.
std::pair<double, Json> rope_of(HfReader& r, int64_t max_positions) {
  const double top_theta = r.number("rope_theta", 10000.0);
  const bool has_params = r.has("rope_parameters");
  const bool has_scaling = r.has("rope_scaling") && !(r.at("rope_scaling").is_object() && r.at("rope_scaling").empty());
  if (has_params && !r.at("rope_parameters").is_object())
    r.fail("'rope_parameters' is ", show(r.at("rope_parameters")), ", not an object");
  if (has_scaling && !r.at("rope_scaling").is_object())
    r.fail("'rope_scaling' is ", show(r.at("rope_scaling")), ", not an object or null");
  if (!has_params && !has_scaling) return {top_theta, Json()};
  Json rope = completed_rope(has_scaling ? r.at("rope_scaling") : r.at("rope_parameters"), top_theta, max_positions);
  if (has_params && has_scaling) {
    const Json other = completed_rope(r.at("rope_parameters"), top_theta, max_positions);
    if (other != rope)
      r.fail("has both 'rope_parameters' ", r.at("rope_parameters").dump(), " and the legacy 'rope_scaling' ",
             r.at("rope_scaling").dump(), ", which disagree (completed as transformers does: ", other.dump(),
             " against ", rope.dump(),
             "). transformers 5 uses rope_scaling and drops rope_parameters, so the two keys describe two models: "
             "remove the one that is wrong from config.json");
  }
  const double theta = rope.at("rope_theta").is_number() ? rope.at("rope_theta").get<double>() : top_theta;
  rope.erase("rope_theta");
  if (rope.at("rope_type") == "default") return {theta, Json()};
  return {theta, rope};
}

// The mixture-of-experts keys of Mixtral's, Qwen3-MoE's and Qwen2-MoE's configs, with their configuration classes'
// defaults, into Tandem's (spec::MoeConfig). transformers names the experts num_local_experts in Mixtral's and, in some
// versions' files, in Qwen3-MoE's too.
void moe_keys(HfReader& r, const std::string& family, Json& m) {
  const bool mixtral = family == "mixtral", qwen2 = family == "qwen2_moe", olmoe = family == "olmoe";
  const char* experts = r.has("num_experts") ? "num_experts" : "num_local_experts";
  m["num_experts"] = r.integer(experts, mixtral ? 8 : qwen2 ? 60 : olmoe ? 64 : 128);
  m["num_experts_per_tok"] = r.integer("num_experts_per_tok", mixtral ? 2 : qwen2 ? 4 : 8);
  // Mixtral's and OLMoE's experts are intermediate_size wide (every MLP a mixture, no dense one).
  m["moe_intermediate_size"] = mixtral || olmoe ? m.at("intermediate_size").get<int64_t>()
                                                : r.integer("moe_intermediate_size", qwen2 ? 1408 : 768);
  if (qwen2) m["shared_expert_intermediate_size"] = r.integer("shared_expert_intermediate_size", 5632);
  m["norm_topk_prob"] = mixtral || r.boolean("norm_topk_prob", false);
  m["router_aux_loss_coef"] = r.number("router_aux_loss_coef", olmoe ? 0.01 : 0.001);
  m["output_router_logits"] = r.boolean("output_router_logits", false);
  if (mixtral) {
    if (r.number("router_jitter_noise", 0.0) != 0.0)
      r.cannot("router_jitter_noise ", show(r.at("router_jitter_noise")),
               ": its router takes the logits as they are (0, transformers' default)");
    return;
  }
  if (olmoe) {
    if (r.has("clip_qkv")) r.cannot("clip_qkv ", show(r.at("clip_qkv")), ": its q, k and v are not clamped");
    return;
  }
  m["decoder_sparse_step"] = r.integer("decoder_sparse_step", 1);
  m["mlp_only_layers"] = r.has("mlp_only_layers") ? r.at("mlp_only_layers") : Json::array();
}

Json llama_model(HfReader& r, const std::string& named) {
  // The attention's keys are its attention family's (Mistral's for Mixtral, Qwen3's for Qwen3-MoE).
  const std::string family = spec::names_of(spec::attention_family(*spec::family_named(named))).name;
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") r.cannot("hidden_act \"", act, "\": its gated MLP uses SiLU only");
  if (r.boolean("mlp_bias", false)) r.cannot("mlp_bias is true: its MLP projections have no bias");
  if (r.has("pretraining_tp") && r.integer("pretraining_tp") != 1)
    r.cannot("pretraining_tp ", show(r.at("pretraining_tp")), ": only 1 (the exact computation) is supported");
  r.dropout({"attention_dropout"});
  const int64_t heads = r.integer("num_attention_heads");
  Json m = {{"type", "llama"},
            {"vocab_size", r.integer("vocab_size")},
            {"hidden_size", r.integer("hidden_size")},
            {"intermediate_size", r.integer("intermediate_size")},
            {"num_hidden_layers", r.integer("num_hidden_layers")},
            {"num_attention_heads", heads},
            {"num_key_value_heads", r.integer("num_key_value_heads", heads)},
            {"max_position_embeddings", r.integer("max_position_embeddings", 2048)},
            {"rms_norm_eps", r.number("rms_norm_eps", 1e-6)},
            {"tie_word_embeddings", r.boolean("tie_word_embeddings", false)},
            {"attention_bias", r.boolean("attention_bias", false)}};
  // Qwen3Config's head_dim is 128 when absent, not hidden_size / num_attention_heads.
  if (r.has("head_dim") || family == "qwen3") m["head_dim"] = r.integer("head_dim", 128);
  const auto [theta, scaling] = rope_of(r, m.at("max_position_embeddings").get<int64_t>());
  m["rope_theta"] = theta;
  m["rope_scaling"] = scaling;
  m["family"] = named;
  if (named != family || named == "olmoe") moe_keys(r, named, m);
  if (family == "qwen2") {
    // Qwen2 has biases on q, k and v but not on o (Qwen2-MoE's config names them, true by default).
    if (named == "qwen2_moe" && !r.boolean("qkv_bias", true))
      r.cannot("qkv_bias false: its attention has Qwen2's biases on q, k and v");
    m["qkv_bias"] = true;
    m["attention_bias"] = false;
  }
  if (family == "qwen2" || family == "qwen3") {
    if (r.boolean("use_sliding_window", false)) r.cannot("use_sliding_window is true: its attention is full");
    m["use_sliding_window"] = false;
    // transformers keeps sliding_window only with use_sliding_window; it is written back as read. Qwen2-MoE's
    // configuration writes 0 for no window: read as none.
    const bool no_window = !r.has("sliding_window") || r.at("sliding_window") == Json(0);
    m["sliding_window"] = no_window ? Json() : Json(r.integer("sliding_window"));
    m["max_window_layers"] = r.has("max_window_layers") ? r.integer("max_window_layers") : 28;
    // Written by transformers from the keys above: every layer "full_attention" without use_sliding_window. A layer
    // named otherwise would attend within a window.
    if (r.has("layer_types")) {
      if (!r.at("layer_types").is_array()) r.fail("'layer_types' is ", show(r.at("layer_types")), ", not a list");
      for (const Json& t : r.at("layer_types"))
        if (t != "full_attention")
          r.cannot("layer_types holds ", show(t), ": its attention is full (\"full_attention\" in every layer)");
    }
  }
  if (family == "mistral") {
    // Absent, transformers' MistralConfig takes 4096; null turns the window off. Checked against seq_len later.
    m["sliding_window"] = !r.present("sliding_window") ? Json(4096)
                          : r.has("sliding_window")    ? Json(r.integer("sliding_window"))
                                                       : Json();
  }
  if (family == "llama") r.has("layer_types");
  return m;
}

}  // namespace

Json model_from_hf_config(const Json& hf, const std::string& dir, std::vector<std::string>* warnings) {
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  if (!hf.is_object()) TANDEM_FAIL("Hugging Face config '", file, "' is not a JSON object");
  std::string arch;
  if (hf.contains("architectures") && hf.at("architectures").is_array() && !hf.at("architectures").empty() &&
      hf.at("architectures")[0].is_string())
    arch = hf.at("architectures")[0].get<std::string>();
  const std::string type = hf.value("model_type", "");
  std::string family;
  if (arch == "GPT2LMHeadModel" || (arch.empty() && type == "gpt2")) family = "gpt2";
  for (const spec::LlamaFamilyNames& f : spec::kLlamaFamilies)
    if (arch == f.architecture || (arch.empty() && type == f.name)) family = f.name;
  if (family.empty())
    TANDEM_FAIL("Hugging Face config '", file, "': architecture ",
                arch.empty() ? "(none; model_type \"" + type + "\")" : "'" + arch + "'",
                " is not one Tandem trains; supported: ", join(supported()));
  HfReader r(hf, dir, arch.empty() ? type : arch);
  Json m = family == "gpt2" ? gpt2_model(r) : llama_model(r, family);
  r.warn(warnings);
  // transformers builds the Llama family's embedding with padding_idx = pad_token_id, so that row never changes there.
  if (warnings && family != "gpt2" && hf.contains("pad_token_id") && hf.at("pad_token_id").is_number_integer())
    warnings->push_back("warning: " + file + ": transformers keeps the embedding row of pad_token_id " +
                        hf.at("pad_token_id").dump() +
                        " fixed (its padding_idx); Tandem trains it like any other, which differs only where that "
                        "token is in the inputs");
  return m;
}

Json hf_config_from_model(const ModelConfig& model, const std::string& torch_dtype) {
  if (const auto* g = std::get_if<GptConfig>(&model)) {
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", g->vocab_size},
            {"n_positions", g->seq_len},
            {"n_embd", g->dim},
            {"n_layer", g->layers},
            {"n_head", g->heads},
            {"n_inner", nullptr},
            {"activation_function", "gelu_new"},
            {"layer_norm_epsilon", kLayerNormEps},
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},
            {"scale_attn_weights", true},
            {"tie_word_embeddings", g->tie_word_embeddings},
            {"torch_dtype", torch_dtype}};
  }
  if (const auto* l = std::get_if<LlamaConfig>(&model)) {
    if (l->qkv_bias && l->attention_bias)
      TANDEM_FAIL("model has both qkv_bias and attention_bias: no Hugging Face architecture has that combination");
    // The attention's keys by its attention family; the names and the experts' keys by the family itself.
    const spec::LlamaFamily attention = spec::attention_family(l->family);
    const bool qwen2 = attention == spec::LlamaFamily::Qwen2;
    const bool qwen3 = attention == spec::LlamaFamily::Qwen3;
    const bool mistral = attention == spec::LlamaFamily::Mistral;
    const char* type = spec::names_of(l->family).name;
    if (qwen2 != l->qkv_bias)
      TANDEM_FAIL("a llama model of family ", type, l->qkv_bias ? " with" : " without",
                  " qkv_bias has no Hugging Face architecture: Qwen2's alone has biases on q, k and v only");
    Json hf = {{"architectures", {spec::names_of(l->family).architecture}},
               {"model_type", type},
               {"hidden_act", "silu"},
               {"torch_dtype", torch_dtype},
               {"vocab_size", l->vocab_size},
               {"hidden_size", l->hidden_size},
               {"intermediate_size", l->intermediate_size},
               {"num_hidden_layers", l->num_hidden_layers},
               {"num_attention_heads", l->num_attention_heads},
               {"num_key_value_heads", l->num_key_value_heads ? l->num_key_value_heads : l->num_attention_heads},
               {"rms_norm_eps", l->rms_norm_eps},
               {"rope_theta", l->rope_theta},
               {"rope_scaling", nullptr},
               {"max_position_embeddings", l->max_position_embeddings ? l->max_position_embeddings : l->seq_len},
               {"tie_word_embeddings", l->tie_word_embeddings}};
    // Qwen3Config reads an absent head_dim as 128: its export always names it.
    if (l->head_dim || qwen3) hf["head_dim"] = l->head_dim ? l->head_dim : l->hidden_size / l->num_attention_heads;
    if (l->rope_scaling.type == RopeType::Llama3)
      hf["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", l->rope_scaling.factor},
                            {"low_freq_factor", l->rope_scaling.low_freq_factor},
                            {"high_freq_factor", l->rope_scaling.high_freq_factor},
                            {"original_max_position_embeddings", l->rope_scaling.original_max_position_embeddings}};
    const Json window = l->sliding_window ? Json(*l->sliding_window) : Json();
    if (qwen2 || qwen3) {
      hf["use_sliding_window"] = l->use_sliding_window;
      hf["sliding_window"] = window;
      // Qwen3-MoE's config has no max_window_layers.
      if (l->family != spec::LlamaFamily::Qwen3Moe) hf["max_window_layers"] = l->max_window_layers;
    }
    if (mistral) hf["sliding_window"] = window;
    if (qwen3) hf["attention_bias"] = l->attention_bias;
    if (!qwen2 && !qwen3 && !mistral) {
      hf["attention_bias"] = l->attention_bias;
      hf["mlp_bias"] = false;
    }
    if (const spec::MoeConfig& e = l->moe; e.num_experts > 0) {
      const bool mixtral = l->family == spec::LlamaFamily::Mixtral;
      hf[mixtral ? "num_local_experts" : "num_experts"] = e.num_experts;
      hf["num_experts_per_tok"] = e.num_experts_per_tok;
      hf["router_aux_loss_coef"] = e.router_aux_loss_coef;
      hf["output_router_logits"] = e.output_router_logits;
      if (mixtral) {
        hf["router_jitter_noise"] = 0.0;
      } else if (l->family == spec::LlamaFamily::Olmoe) {
        hf["norm_topk_prob"] = e.norm_topk_prob;
        hf["clip_qkv"] = nullptr;
      } else {
        hf["moe_intermediate_size"] = e.moe_intermediate_size;
        hf["norm_topk_prob"] = e.norm_topk_prob;
        hf["decoder_sparse_step"] = e.decoder_sparse_step;
        hf["mlp_only_layers"] = e.mlp_only_layers;
      }
      if (l->family == spec::LlamaFamily::Qwen2Moe) {
        hf["shared_expert_intermediate_size"] = e.shared_expert_intermediate_size;
        hf["qkv_bias"] = true;
      }
    }
    return hf;
  }
  TANDEM_FAIL("a model of type '", model_type(model),
              "' has no Hugging Face architecture to export to; gpt and llama do");
}

Json read_hf_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path file = fs::path(dir) / "config.json";
  if (!fs::is_directory(dir))
    TANDEM_FAIL("model.from_pretrained '", dir, "' is not a folder: name a Hugging Face model folder (config.json ",
                "and model.safetensors, as save_pretrained writes)");
  std::ifstream in(file);
  if (!in)
    TANDEM_FAIL("model.from_pretrained '", dir, "' has no config.json: is it a Hugging Face model folder ",
                "(save_pretrained writes one)?");
  std::ostringstream text;
  text << in.rdbuf();
  const Json hf = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (hf.is_discarded()) TANDEM_FAIL("Hugging Face config '", file.string(), "' is not valid JSON");
  return hf;
}

void expand_from_pretrained(Json& model, std::vector<std::string>* warnings) {
  if (!model.is_object() || !model.contains("from_pretrained")) return;
  const Json& from = model.at("from_pretrained");
  if (!from.is_string() || from.get<std::string>().empty())
    TANDEM_FAIL("config key 'model.from_pretrained' is ", show(from),
                ", not a folder name: give a Hugging Face model folder, e.g. \"from_pretrained\": \"gpt2\"");
  const std::string dir = from.get<std::string>();
  if (!model.contains("seq_len"))
    TANDEM_FAIL("missing required config key 'model.seq_len' beside model.from_pretrained: the length of the ",
                "training windows, e.g. \"seq_len\": 1024");
  Json expanded = model_from_hf_config(read_hf_config(dir), dir, warnings);
  // Keys the folder's config decides must agree with it; others (defaults the schema wrote) are kept for the
  // schema to judge.
  for (const auto& [key, value] : model.items()) {
    if (key == "from_pretrained" || key == "seq_len") continue;
    const auto it = expanded.find(key);
    if (it == expanded.end()) {
      expanded[key] = value;
    } else if (*it != value) {
      TANDEM_FAIL("config key 'model.", key, "' is ", show(value), " but model.from_pretrained '", dir, "' says ",
                  show(*it), ": beside from_pretrained give only seq_len (the rest comes from its config.json)");
    }
  }
  expanded["seq_len"] = model.at("seq_len");
  expanded["from_pretrained"] = dir;
  const auto family = spec::family_named(expanded.value("family", ""));
  if (family && spec::attention_family(*family) == spec::LlamaFamily::Mistral && expanded.contains("sliding_window") &&
      !expanded.at("sliding_window").is_null()) {
    const std::optional<int64_t> seq = as_integer(expanded.at("seq_len"));
    if (seq && expanded.at("sliding_window").get<int64_t>() < *seq)
      TANDEM_FAIL("model.from_pretrained '", dir, "': its sliding_window (", expanded.at("sliding_window"),
                  ") is shorter than model.seq_len (", *seq,
                  "): Tandem's attention is full, so use seq_len <= sliding_window");
  }
  model = std::move(expanded);
}

}  // namespace tandem::config
