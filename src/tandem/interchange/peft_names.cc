// The adaptable modules of GPT-2 and Llama models and PEFT's target matching (peft_names.h). Module names follow
// transformers' GPT2LMHeadModel and LlamaForCausalLM (Mistral and Qwen2 name theirs as Llama does); a sparse layer of
// the mixtures of experts has Qwen2-MoE's shared expert (mlp.shared_expert.* and mlp.shared_expert_gate) as its only
// nn.Linear modules besides attention's (transformers keeps the experts in 3-D parameters and the router in a module of
// its own).
#include "tandem/interchange/peft_names.h"

#include <algorithm>
#include <regex>
#include <set>
#include <variant>

#include "tandem/core/error.h"

namespace tandem::interchange {
namespace {

// A module's site: PEFT names its tensors after the module itself.
LoraSite module_site(std::string module, std::string site, std::string weight, int64_t row, int64_t in, int64_t out) {
  LoraSite s{std::move(module), std::move(site), std::move(weight), row, in, out, 0, ""};
  s.peft = s.module;
  return s;
}

std::vector<LoraSite> gpt2_sites(const spec::GptConfig& g) {
  const int64_t c = g.dim;
  std::vector<LoraSite> out;
  for (int64_t i = 0; i < g.layers; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".", t = "blocks." + std::to_string(i) + ".";
    // GPT-2 fuses q, k and v in one Conv1D (c_attn): one adapter over all three, as PEFT puts it.
    out.push_back(module_site(h + "attn.c_attn", t + "qkv", t + "qkv.weight", 0, c, 3 * c));
    out.push_back(module_site(h + "attn.c_proj", t + "proj", t + "proj.weight", 0, c, c));
    out.push_back(module_site(h + "mlp.c_fc", t + "fc", t + "fc.weight", 0, c, 4 * c));
    out.push_back(module_site(h + "mlp.c_proj", t + "out", t + "out.weight", 0, 4 * c, c));
  }
  return out;
}

std::vector<LoraSite> llama_sites(const spec::LlamaConfig& m) {
  const int64_t c = m.hidden_size, f = m.intermediate_size, heads = m.num_attention_heads;
  const int64_t kv = m.num_key_value_heads ? m.num_key_value_heads : heads;
  const int64_t d = m.head_dim ? m.head_dim : c / heads;
  std::vector<LoraSite> out;
  for (int64_t i = 0; i < m.num_hidden_layers; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", t = "layers." + std::to_string(i) + ".";
    // q, k and v are rows of Tandem's one qkv weight, gate and up of its one gate_up: an adapter on each is an adapter
    // on those rows alone.
    out.push_back(module_site(h + "self_attn.q_proj", t + "qkv.q", t + "qkv.weight", 0, c, heads * d));
    out.push_back(module_site(h + "self_attn.k_proj", t + "qkv.k", t + "qkv.weight", heads * d, c, kv * d));
    out.push_back(module_site(h + "self_attn.v_proj", t + "qkv.v", t + "qkv.weight", (heads + kv) * d, c, kv * d));
    out.push_back(module_site(h + "self_attn.o_proj", t + "o", t + "o.weight", 0, heads * d, c));
    if (spec::sparse_layer(m, i)) {
      // The shared expert, a dense SwiGLU of width fs in MoeMlp's shared_gate_up (gate rows, then up) and shared_down.
      if (const int64_t fs = m.moe.shared_expert_intermediate_size; fs > 0) {
        const std::string x = h + "mlp.shared_expert.", u = t + "moe.shared_gate_up", dn = t + "moe.shared_down";
        out.push_back(module_site(x + "gate_proj", u + ".gate", u + ".weight", 0, c, fs));
        out.push_back(module_site(x + "up_proj", u + ".up", u + ".weight", fs, c, fs));
        out.push_back(module_site(x + "down_proj", dn, dn + ".weight", 0, fs, c));
        // Its gate, an nn.Linear of one output in transformers (C -> 1), the logit of the sigmoid that weighs it.
        const std::string g = t + "moe.shared_expert_gate";
        out.push_back(module_site(h + "mlp.shared_expert_gate", g, g + ".weight", 0, c, 1));
      }
      continue;
    }
    out.push_back(module_site(h + "mlp.gate_proj", t + "gate_up.gate", t + "gate_up.weight", 0, c, f));
    out.push_back(module_site(h + "mlp.up_proj", t + "gate_up.up", t + "gate_up.weight", f, c, f));
    out.push_back(module_site(h + "mlp.down_proj", t + "down", t + "down.weight", 0, f, c));
  }
  return out;
}

// The modules PEFT could match that Tandem does not adapt.
std::vector<std::string> unadaptable(const spec::ModelConfig& model) {
  if (std::holds_alternative<spec::GptConfig>(model)) return {"transformer.wte", "transformer.wpe", "lm_head"};
  return {"model.embed_tokens", "lm_head"};
}

// PEFT's rule for a list entry: the whole name, or its end after a dot.
bool name_matches(const std::string& target, const std::string& module) {
  if (module == target) return true;
  return module.size() > target.size() && module.compare(module.size() - target.size(), target.size(), target) == 0 &&
         module[module.size() - target.size() - 1] == '.';
}

// The expert parameters `targets` selects (each entry selecting at least one), with PEFT's names for their tensors.
std::vector<LoraSite> parameter_targets(const spec::ModelConfig& model, const std::vector<std::string>& targets) {
  if (targets.empty()) return {};
  const std::vector<LoraSite> all = expert_parameter_sites(model);
  std::set<std::string> selected;
  for (const std::string& t : targets) {
    bool found = false;
    for (const LoraSite& s : all)
      if (name_matches(t, s.module)) {
        selected.insert(s.module);
        found = true;
      }
    if (found) continue;
    if (all.empty())
      TANDEM_FAIL("lora.target_parameters names '", t,
                  "', but the model has no mixture-of-experts layer: target_parameters adapts a sparse layer's "
                  "experts; adapt the projections with target_modules");
    TANDEM_FAIL("lora.target_parameters names '", t,
                "', which no expert parameter of the model is: it takes the "
                "experts' stacked gate_up_proj and down_proj (e.g. ",
                all.front().module, ", ", all.back().module, "); a projection's adapter is target_modules'");
  }
  std::vector<LoraSite> out;
  for (const LoraSite& s : all)
    if (selected.count(s.module)) out.push_back(s);
  for (LoraSite& s : out) {
    const std::string experts = s.module.substr(0, s.module.rfind('.'));
    const bool nested = s.module == experts + ".gate_up_proj" && selected.count(experts + ".down_proj");
    s.peft = nested ? experts + ".base_layer" : experts;
  }
  return out;
}

// "q_proj, k_proj, ... (e.g. model.layers.0.self_attn.q_proj)": the short names of the sites, for messages.
std::string describe(const std::vector<LoraSite>& sites) {
  std::vector<std::string> shorts;
  for (const LoraSite& s : sites) {
    const std::string last = s.module.substr(s.module.rfind('.') + 1);
    if (std::find(shorts.begin(), shorts.end(), last) == shorts.end()) shorts.push_back(last);
  }
  std::string out;
  for (const std::string& n : shorts) out += (out.empty() ? "" : ", ") + n;
  return out + (sites.empty() ? "" : " (e.g. " + sites.front().module + ")");
}

std::vector<LoraSite> module_targets(const spec::ModelConfig& model, const spec::LoraConfig& lora) {
  const std::vector<LoraSite> all = lora_sites(model);
  if (!lora.target_regex.empty()) {
    const std::regex pattern(lora.target_regex);
    std::vector<LoraSite> out;
    for (const LoraSite& s : all)
      if (std::regex_match(s.module, pattern)) out.push_back(s);
    for (const std::string& m : unadaptable(model))
      if (std::regex_match(m, pattern))
        TANDEM_FAIL("lora.target_modules \"", lora.target_regex, "\" matches '", m,
                    "': Tandem adapts the blocks' projections, not the embeddings or the head; narrow the expression");
    if (out.empty())
      TANDEM_FAIL("lora.target_modules \"", lora.target_regex, "\" matches no module of the model; its modules are ",
                  describe(all));
    return out;
  }
  if (lora.target_modules.size() == 1 && lora.target_modules[0] == "all-linear") return all;
  std::set<std::string> selected;
  for (const std::string& t : lora.target_modules) {
    bool found = false;
    for (const LoraSite& s : all)
      if (name_matches(t, s.module)) {
        selected.insert(s.module);
        found = true;
      }
    for (const std::string& m : unadaptable(model))
      if (name_matches(t, m))
        TANDEM_FAIL("lora.target_modules names '", t, "', which is ", m,
                    ": Tandem adapts the blocks' projections, not the embeddings or the head; remove it");
    if (!found)
      TANDEM_FAIL("lora.target_modules names '", t, "', which no module of the model is; its modules are ",
                  describe(all));
  }
  std::vector<LoraSite> out;
  for (const LoraSite& s : all)
    if (selected.count(s.module)) out.push_back(s);
  return out;
}

}  // namespace

std::vector<LoraSite> lora_sites(const spec::ModelConfig& model) {
  if (const auto* g = std::get_if<spec::GptConfig>(&model)) return gpt2_sites(*g);
  if (const auto* l = std::get_if<spec::LlamaConfig>(&model)) return llama_sites(*l);
  TANDEM_FAIL("LoRA adapts gpt and llama models, not a model of type '", spec::model_type(model), "'");
}

std::vector<LoraSite> expert_parameter_sites(const spec::ModelConfig& model) {
  const auto* m = std::get_if<spec::LlamaConfig>(&model);
  std::vector<LoraSite> out;
  if (!m) return out;
  const int64_t c = m->hidden_size, f = m->moe.moe_intermediate_size, e = m->moe.num_experts;
  for (int64_t i = 0; i < m->num_hidden_layers; ++i) {
    if (!spec::sparse_layer(*m, i)) continue;
    // transformers 5 keeps every family's experts in mlp.experts (Mixtral's checkpoints too, as block_sparse_moe).
    const std::string h = "model.layers." + std::to_string(i) + ".mlp.experts.",
                      t = "layers." + std::to_string(i) + ".moe.";
    out.push_back({h + "gate_up_proj", t + "gate_up", t + "gate_up.weight", 0, c, 2 * f, e, ""});
    out.push_back({h + "down_proj", t + "down", t + "down.weight", 0, f, c, e, ""});
  }
  return out;
}

std::vector<LoraSite> lora_targets(const spec::ModelConfig& model, const spec::LoraConfig& lora) {
  std::vector<LoraSite> out = module_targets(model, lora);
  for (LoraSite& s : parameter_targets(model, lora.target_parameters)) out.push_back(std::move(s));
  return out;
}

std::string peft_lora_a_name(const std::string& module) { return "base_model.model." + module + ".lora_A.weight"; }
std::string peft_lora_b_name(const std::string& module) { return "base_model.model." + module + ".lora_B.weight"; }
std::string tandem_lora_a_name(const std::string& site) { return site + ".lora_A"; }
std::string tandem_lora_b_name(const std::string& site) { return site + ".lora_B"; }

}  // namespace tandem::interchange
