// The schema of a "type": "llama" model object (validate_llama): Hugging Face LlamaConfig's keys and defaults, its rope
// scaling and its family's keys (Mistral's, Qwen2's and Qwen3's). The rest of the schema is in schema.cc.
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "tandem/config/fields.h"
#include "tandem/core/error.h"
#include "tandem/spec/models.h"

namespace tandem::config {

int64_t nearest_divisor(int64_t n, int64_t near) {
  int64_t divisor = 1;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0 && std::llabs(d - near) < std::llabs(divisor - near)) divisor = d;
  return divisor;
}

namespace {

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

// The mixture-of-experts keys (spec::MoeConfig) of "mixtral", "qwen3_moe" and "qwen2_moe" (with its shared expert);
// refused for the dense families.
void validate_moe(Fields& m, const std::string& family, int64_t layers) {
  const std::vector<std::string> keys = {
      "num_experts",          "num_experts_per_tok",  "moe_intermediate_size",
      "norm_topk_prob",       "decoder_sparse_step",  "mlp_only_layers",
      "router_aux_loss_coef", "output_router_logits", "shared_expert_intermediate_size"};
  if (family != "mixtral" && family != "qwen3_moe" && family != "qwen2_moe" && family != "olmoe") {
    for (const std::string& k : keys)
      if (m.has(k))
        TANDEM_FAIL("model.", k,
                    " is a key of the mixture-of-experts families (\"mixtral\", \"qwen3_moe\", \"qwen2_moe\", "
                    "\"olmoe\"), not of \"",
                    family, "\": remove it");
    return;
  }
  if (family == "qwen2_moe")
    m.integer("shared_expert_intermediate_size", std::nullopt, 1, int64_t{1} << 22);
  else if (m.has("shared_expert_intermediate_size"))
    TANDEM_FAIL("model.shared_expert_intermediate_size is Qwen2-MoE's key (\"qwen2_moe\"): \"", family,
                "\" has no shared expert; remove it");
  const int64_t experts = m.integer("num_experts", std::nullopt, 1, int64_t{1} << 16);
  m.integer("num_experts_per_tok", std::nullopt, 1, experts);
  m.integer("moe_intermediate_size", m.raw("intermediate_size").get<int64_t>(), 1, int64_t{1} << 22);
  if (!m.boolean("norm_topk_prob", family == "mixtral") && family == "mixtral")
    TANDEM_FAIL(
        "model.norm_topk_prob false with model.family \"mixtral\": Mixtral always divides the chosen "
        "experts' weights by their sum; remove the key");
  m.integer("decoder_sparse_step", 1, 1, int64_t{1} << 16);
  if (!m.has("mlp_only_layers")) m.raw("mlp_only_layers") = Json::array();
  if (!m.raw("mlp_only_layers").is_array()) m.fail_type("mlp_only_layers", "a list of layer indices");
  for (const Json& i : m.raw("mlp_only_layers")) {
    const std::optional<int64_t> layer = as_integer(i);
    if (!layer || *layer < 0 || *layer >= layers)
      TANDEM_FAIL("model.mlp_only_layers holds ", show(i), ", not a layer index in [0, ", layers, ")");
  }
  m.number("router_aux_loss_coef", 0.001, 0.0);
  m.boolean("output_router_logits", false);
}

// "family": the Hugging Face architecture the model is read as and exported to (spec::LlamaFamily), with that
// family's own keys. Without it, a model with qkv_bias is Qwen2's (as exports were before the key), any other Llama's.
// "qwen3" and "qwen3_moe" also decide the function: q and k normalised per head (spec::qk_norm); "mixtral",
// "qwen3_moe" and "qwen2_moe" have mixtures of experts (validate_moe). Their attention keys are those of "mistral",
// "qwen3" and "qwen2".
void validate_llama_family(Fields& m, int64_t seq_len) {
  const bool qkv_bias = m.raw("qkv_bias").get<bool>();
  std::vector<std::string> names;
  for (const spec::LlamaFamilyNames& f : spec::kLlamaFamilies) names.push_back(f.name);
  const std::string named = m.choice("family", qkv_bias ? "qwen2" : "llama", names);
  validate_moe(m, named, m.raw("num_hidden_layers").get<int64_t>());
  const std::string family = spec::names_of(spec::attention_family(*spec::family_named(named))).name;
  if (family == "qwen2" && !qkv_bias)
    TANDEM_FAIL("model.family \"qwen2\" with qkv_bias false: Qwen2's attention has biases on q, k and v; set ",
                "\"qkv_bias\": true, or another family");
  if (family != "qwen2" && qkv_bias)
    TANDEM_FAIL("model.qkv_bias true with model.family \"", family,
                "\": biases on q, k and v alone are Qwen2's form; set \"family\": \"qwen2\", or use attention_bias "
                "(biases on q, k, v and o, as Llama's and Qwen3's)");
  if (family == "mistral" && m.raw("attention_bias").get<bool>())
    TANDEM_FAIL("model.attention_bias true with model.family \"mistral\": Mistral's projections have no biases; set ",
                "\"family\": \"llama\" or \"attention_bias\": false");
  const std::vector<std::string> window_keys = {"sliding_window", "use_sliding_window", "max_window_layers"};
  if (family == "olmoe") {
    // Its whole-projection norms run through the per-head op with q and k as one head each, so they must be alike.
    const int64_t heads = m.raw("num_attention_heads").get<int64_t>();
    if (m.has("num_key_value_heads") && m.raw("num_key_value_heads").get<int64_t>() != heads)
      TANDEM_FAIL("model.num_key_value_heads ", m.raw("num_key_value_heads").get<int64_t>(),
                  " with model.family \"olmoe\": its q_norm and k_norm are built for as many key/value heads as "
                  "query heads (",
                  heads, "); grouped-query OLMoE is not built yet");
  }
  if (family == "llama" || family == "olmoe") {
    for (const std::string& k : window_keys)
      if (m.has(k))
        TANDEM_FAIL("model.", k, " is a key of model.family \"mistral\", \"qwen2\" or \"qwen3\", not of \"", family,
                    "\": remove it");
    return;
  }
  if (family == "mistral" && m.has("use_sliding_window"))
    TANDEM_FAIL(
        "model.use_sliding_window is Qwen2's and Qwen3's key: Mistral applies sliding_window whenever it is not null");
  if (family == "mistral" && m.has("max_window_layers"))
    TANDEM_FAIL("model.max_window_layers is Qwen2's and Qwen3's key: remove it for model.family \"mistral\"");
  if (!m.has("sliding_window") || m.raw("sliding_window").is_null())
    m.raw("sliding_window") = nullptr;
  else
    m.integer("sliding_window", std::nullopt, 1);
  const Json& window = m.raw("sliding_window");
  if (family == "mistral") {
    if (!window.is_null() && window.get<int64_t>() < seq_len)
      TANDEM_FAIL("model.sliding_window (", window.get<int64_t>(), ") is shorter than model.seq_len (", seq_len,
                  "): Mistral would attend to the last ", window.get<int64_t>(),
                  " positions only, and Tandem's attention is full; use seq_len <= sliding_window");
    return;
  }
  if (m.boolean("use_sliding_window", false))
    TANDEM_FAIL("model.use_sliding_window is true: ", family == "qwen3" ? "Qwen3" : "Qwen2",
                " would attend within a sliding window and Tandem's attention is full; set it to false");
  m.integer("max_window_layers", 28, 0);
}

}  // namespace

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
  validate_llama_family(m, seq_len);
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

}  // namespace tandem::config
