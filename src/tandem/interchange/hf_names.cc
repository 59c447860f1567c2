// The GPT-2 and Llama name maps (hf_names.h). Sizes come from the model object, the names from transformers'
// GPT2LMHeadModel and LlamaForCausalLM (Mistral, Qwen2 and Qwen3 name their tensors as Llama does; Qwen3 adds its
// per-head norms' gains).
#include "tandem/interchange/hf_names.h"

#include <variant>

#include "tandem/core/error.h"

namespace tandem::interchange {
namespace {

// A parameter filled by one Hugging Face tensor, whole.
HfMapping whole(const std::string& name, Shape shape, const std::string& hf, bool transposed = false) {
  const int64_t rows = shape_numel(shape) / hf_columns(shape);
  return {name, std::move(shape), {{hf, 0, rows, transposed, false}}};
}

// A parameter whose rows are the Hugging Face tensors one after another.
HfMapping rows_of(const std::string& name, Shape shape, const std::vector<std::pair<std::string, int64_t>>& parts) {
  HfMapping m{name, std::move(shape), {}};
  int64_t row = 0;
  for (const auto& [hf, rows] : parts) {
    m.pieces.push_back({hf, row, rows, false, false});
    row += rows;
  }
  TANDEM_CHECK(row == shape_numel(m.shape) / hf_columns(m.shape), "pieces of ", name, " cover ", row, " rows of ",
               shape_str(m.shape));
  return m;
}

std::vector<HfMapping> gpt2_map(const spec::GptConfig& model) {
  const int64_t v = model.vocab_size, c = model.dim, s = model.seq_len;
  std::vector<HfMapping> out;
  out.push_back(whole("wte.weight", {v, c}, "transformer.wte.weight"));
  out.push_back({"wpe.weight", {s, c}, {{"transformer.wpe.weight", 0, s, false, true}}});
  for (int64_t i = 0; i < model.layers; ++i) {
    const std::string t = "blocks." + std::to_string(i) + ".", h = "transformer.h." + std::to_string(i) + ".";
    for (const char* p : {"weight", "bias"}) out.push_back(whole(t + "ln1." + p, {c}, h + "ln_1." + p));
    out.push_back(whole(t + "qkv.weight", {3 * c, c}, h + "attn.c_attn.weight", true));
    out.push_back(whole(t + "qkv.bias", {3 * c}, h + "attn.c_attn.bias"));
    out.push_back(whole(t + "proj.weight", {c, c}, h + "attn.c_proj.weight", true));
    out.push_back(whole(t + "proj.bias", {c}, h + "attn.c_proj.bias"));
    for (const char* p : {"weight", "bias"}) out.push_back(whole(t + "ln2." + p, {c}, h + "ln_2." + p));
    out.push_back(whole(t + "fc.weight", {4 * c, c}, h + "mlp.c_fc.weight", true));
    out.push_back(whole(t + "fc.bias", {4 * c}, h + "mlp.c_fc.bias"));
    out.push_back(whole(t + "out.weight", {c, 4 * c}, h + "mlp.c_proj.weight", true));
    out.push_back(whole(t + "out.bias", {c}, h + "mlp.c_proj.bias"));
  }
  for (const char* p : {"weight", "bias"})
    out.push_back(whole(std::string("lnf.") + p, {c}, std::string("transformer.ln_f.") + p));
  if (!model.tie_word_embeddings) out.push_back(whole("head.weight", {v, c}, "lm_head.weight"));
  return out;
}

// A sparse layer's MLP (nn::MoeMlp): the router and the experts' stacked weights, each expert's gate rows then up rows
// then the next expert's. Mixtral names them block_sparse_moe's gate and experts' w1 (gate), w3 (up) and w2 (down);
// Qwen3-MoE and Qwen2-MoE mlp's gate and experts' gate_proj, up_proj and down_proj; Qwen2-MoE's shared expert is mlp's
// shared_expert (gate_proj, up_proj, down_proj) and shared_expert_gate. `t` and `h` are the layer's prefixes.
void moe_map(const spec::LlamaConfig& model, const std::string& t, const std::string& h, std::vector<HfMapping>& out) {
  const int64_t c = model.hidden_size, f = model.moe.moe_intermediate_size, e = model.moe.num_experts;
  const bool mixtral = model.family == spec::LlamaFamily::Mixtral;
  const std::string block = h + (mixtral ? "block_sparse_moe." : "mlp.");
  const char* gate = mixtral ? "w1" : "gate_proj";
  const char* up = mixtral ? "w3" : "up_proj";
  const char* down = mixtral ? "w2" : "down_proj";
  out.push_back(whole(t + "moe.router.weight", {e, c}, block + "gate.weight"));
  std::vector<std::pair<std::string, int64_t>> gate_up, downs;
  for (int64_t j = 0; j < e; ++j) {
    const std::string x = block + "experts." + std::to_string(j) + ".";
    gate_up.push_back({x + gate + ".weight", f});
    gate_up.push_back({x + up + ".weight", f});
    downs.push_back({x + down + ".weight", c});
  }
  out.push_back(rows_of(t + "moe.gate_up.weight", {e, 2 * f, c}, gate_up));
  out.push_back(rows_of(t + "moe.down.weight", {e, c, f}, downs));
  if (const int64_t fs = model.moe.shared_expert_intermediate_size; fs > 0) {
    const std::string x = block + "shared_expert.";
    out.push_back(whole(t + "moe.shared_expert_gate.weight", {1, c}, block + "shared_expert_gate.weight"));
    out.push_back(rows_of(t + "moe.shared_gate_up.weight", {2 * fs, c},
                          {{x + "gate_proj.weight", fs}, {x + "up_proj.weight", fs}}));
    out.push_back(whole(t + "moe.shared_down.weight", {c, fs}, x + "down_proj.weight"));
  }
}

std::vector<HfMapping> llama_map(const spec::LlamaConfig& model) {
  const int64_t v = model.vocab_size, c = model.hidden_size, f = model.intermediate_size;
  const int64_t heads = model.num_attention_heads;
  const int64_t kv = model.num_key_value_heads ? model.num_key_value_heads : heads;
  const int64_t d = model.head_dim ? model.head_dim : c / heads;
  const bool o_bias = model.attention_bias;
  const bool qkv_bias = o_bias || model.qkv_bias;
  std::vector<HfMapping> out;
  out.push_back(whole("embed.weight", {v, c}, "model.embed_tokens.weight"));
  for (int64_t i = 0; i < model.num_hidden_layers; ++i) {
    const std::string t = "layers." + std::to_string(i) + ".", h = "model.layers." + std::to_string(i) + ".";
    out.push_back(whole(t + "attn_norm.weight", {c}, h + "input_layernorm.weight"));
    const int64_t qkv_rows = (heads + 2 * kv) * d;
    for (const char* p : {"weight", "bias"}) {
      if (std::string(p) == "bias" && !qkv_bias) continue;
      const std::string a = h + "self_attn.";
      Shape shape = std::string(p) == "weight" ? Shape{qkv_rows, c} : Shape{qkv_rows};
      out.push_back(
          rows_of(t + "qkv." + p, shape,
                  {{a + "q_proj." + p, heads * d}, {a + "k_proj." + p, kv * d}, {a + "v_proj." + p, kv * d}}));
    }
    if (spec::qk_norm(model))
      for (const char* n : {"q_norm", "k_norm"})
        out.push_back(whole(t + n + ".weight", {d}, h + "self_attn." + n + ".weight"));
    if (spec::qk_norm_whole(model)) {  // OLMoE's: over all of q and all of k
      out.push_back(whole(t + "q_norm.weight", {heads * d}, h + "self_attn.q_norm.weight"));
      out.push_back(whole(t + "k_norm.weight", {kv * d}, h + "self_attn.k_norm.weight"));
    }
    out.push_back(whole(t + "o.weight", {c, heads * d}, h + "self_attn.o_proj.weight"));
    if (o_bias) out.push_back(whole(t + "o.bias", {c}, h + "self_attn.o_proj.bias"));
    out.push_back(whole(t + "mlp_norm.weight", {c}, h + "post_attention_layernorm.weight"));
    if (spec::sparse_layer(model, i)) {
      moe_map(model, t, h, out);
      continue;
    }
    out.push_back(
        rows_of(t + "gate_up.weight", {2 * f, c}, {{h + "mlp.gate_proj.weight", f}, {h + "mlp.up_proj.weight", f}}));
    out.push_back(whole(t + "down.weight", {c, f}, h + "mlp.down_proj.weight"));
  }
  out.push_back(whole("norm.weight", {c}, "model.norm.weight"));
  if (!model.tie_word_embeddings) out.push_back(whole("head.weight", {v, c}, "lm_head.weight"));
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::vector<HfMapping> hf_name_map(const spec::ModelConfig& model) {
  if (const auto* g = std::get_if<spec::GptConfig>(&model)) return gpt2_map(*g);
  if (const auto* l = std::get_if<spec::LlamaConfig>(&model)) return llama_map(*l);
  TANDEM_FAIL("a model of type '", spec::model_type(model),
              "' has no Hugging Face counterpart; gpt (GPT-2) and llama do");
}

int64_t hf_columns(const Shape& shape) { return shape.size() >= 2 ? shape.back() : 1; }

const char* hf_tied_head_name() { return "lm_head.weight"; }

bool is_hf_buffer(const std::string& n) {
  return ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias") || ends_with(n, "rotary_emb.inv_freq");
}

Shape hf_piece_shape(const HfPiece& p, const Shape& shape) {
  if (shape.size() == 1) return {p.rows};
  return p.transposed ? Shape{hf_columns(shape), p.rows} : Shape{p.rows, hf_columns(shape)};
}

int64_t hf_index(const HfPiece& p, const Shape& shape, const Shape& hf_shape, int64_t index) {
  const int64_t cols = hf_columns(shape);
  const int64_t row = index / cols - p.row, col = index % cols;
  if (p.transposed) return col * hf_shape.at(1) + row;
  return row * cols + col;
}

const HfPiece& piece_of(const HfMapping& m, int64_t index) {
  const int64_t row = index / hf_columns(m.shape);
  for (const HfPiece& p : m.pieces)
    if (row >= p.row && row < p.row + p.rows) return p;
  TANDEM_FAIL("element ", index, " of '", m.name, "' lies in no Hugging Face tensor");
}

}  // namespace tandem::interchange
