#include "tandem/nn/llama.h"

#include <cmath>
#include <memory>

#include "tandem/nn/llama_layers.h"

namespace tandem::nn {

ops::RopeScaling rope_scaling_of(const LlamaConfig& c) {
  ops::RopeScaling s;
  if (c.rope_scaling.type == spec::RopeType::None) return s;  // "default"
  s.rope_type = "llama3";
  s.factor = c.rope_scaling.factor;
  s.low_freq_factor = c.rope_scaling.low_freq_factor;
  s.high_freq_factor = c.rope_scaling.high_freq_factor;
  s.original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
  return s;
}

LlamaConfig resolve_llama(const LlamaConfig& cfg, int tp) {
  LlamaConfig c = cfg;
  if (c.vocab_size <= 0 || c.seq_len <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers < 0)
    TANDEM_FAIL("llama: vocab_size ", c.vocab_size, ", seq_len ", c.seq_len, ", hidden_size ", c.hidden_size,
                ", intermediate_size ", c.intermediate_size, " must be positive and num_hidden_layers ",
                c.num_hidden_layers, " not negative");
  if (c.num_attention_heads <= 0)
    TANDEM_FAIL("llama: num_attention_heads ", c.num_attention_heads, " must be positive");
  if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
  const int h = c.num_attention_heads, kv = c.num_key_value_heads;
  if (kv < 0 || h % kv != 0)
    TANDEM_FAIL("llama: num_attention_heads ", h, " is not a multiple of num_key_value_heads ", kv,
                ": each key/value head serves the same number of query heads; choose num_key_value_heads among the "
                "divisors of ",
                h);
  if (c.head_dim == 0) {
    if (c.hidden_size % h != 0)
      TANDEM_FAIL("llama: hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ", h,
                  "; set head_dim or change one of them");
    c.head_dim = c.hidden_size / h;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    TANDEM_FAIL("llama: head_dim ", c.head_dim, " must be positive and even (the rotary embedding turns pairs)");
  if (c.max_position_embeddings == 0) c.max_position_embeddings = c.seq_len;
  if (c.seq_len > c.max_position_embeddings)
    TANDEM_FAIL("llama: seq_len ", c.seq_len, " exceeds max_position_embeddings ", c.max_position_embeddings,
                "; train on at most ", c.max_position_embeddings, " tokens or raise max_position_embeddings");
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0))
    TANDEM_FAIL("llama: rms_norm_eps ", c.rms_norm_eps, " must be a positive number");
  if (tp > 1) {
    if (h % tp != 0 || kv % tp != 0)
      TANDEM_FAIL("llama: tensor parallelism over ", tp, " slots splits the heads, but num_attention_heads ", h,
                  " and num_key_value_heads ", kv,
                  " must both be multiples of it; use a tp that divides both (1 always does)");
    if (c.intermediate_size % tp != 0 || c.vocab_size % tp != 0)
      TANDEM_FAIL("llama: tensor parallelism over ", tp, " slots splits intermediate_size ", c.intermediate_size,
                  " and vocab_size ", c.vocab_size, "; both must be multiples of it (pad the vocabulary or change tp)");
  }
  if (c.moe.num_experts > 0 && (c.moe.num_experts_per_tok <= 0 || c.moe.num_experts_per_tok > c.moe.num_experts ||
                                c.moe.moe_intermediate_size <= 0))
    TANDEM_FAIL("llama: ", c.moe.num_experts_per_tok, " experts per token of ", c.moe.num_experts,
                ", each of moe_intermediate_size ", c.moe.moe_intermediate_size,
                ": choose 1 to num_experts experts per token and a positive width");
  // The tables' own checks (theta, the llama3 numbers) say what is wrong with the rope fields.
  (void)ops::rope_inverse_frequencies(c.head_dim, c.rope_theta, rope_scaling_of(c));
  return c;
}

Model build_llama(const LlamaConfig& cfg, TpSlot tp, const LoraTargets* lora, const spec::Fp8Config& fp8) {
  const LlamaConfig c = resolve_llama(cfg, tp.size);
  auto rope = std::make_shared<RopeCache>(ops::rope_inverse_frequencies(c.head_dim, c.rope_theta, rope_scaling_of(c)),
                                          c.seq_len);
  LlamaBlockShape shape;
  shape.dim = c.hidden_size;
  shape.intermediate = c.intermediate_size;
  shape.heads = c.num_attention_heads;
  shape.kv_heads = c.num_key_value_heads;
  shape.head_dim = c.head_dim;
  shape.eps = static_cast<float>(c.rms_norm_eps);
  shape.qkv_bias = qkv_biased(c);
  shape.o_bias = o_biased(c);
  shape.qk_norm = spec::qk_norm(c);
  shape.qk_norm_whole = spec::qk_norm_whole(c);
  Model model;
  LoraSites sites(lora);
  model.add(sites.frozen(std::make_unique<LlamaEmbedding>(c.vocab_size, c.seq_len, c.hidden_size, tp)));
  Model::Fp8Use fp8_use;
  const MoeShape experts{c.hidden_size,        c.moe.moe_intermediate_size,
                         c.moe.num_experts,    c.moe.num_experts_per_tok,
                         c.moe.norm_topk_prob, c.moe.shared_expert_intermediate_size};
  int sparse = 0;
  std::vector<int> sparse_layers;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LlamaBlockShape layer = shape;
    if (spec::sparse_layer(c, i)) {
      layer.moe = experts;
      layer.moe.index = sparse++;
      sparse_layers.push_back(static_cast<int>(i));
    }
    auto block = std::make_unique<LlamaBlock>(static_cast<int>(i), layer, rope, tp);
    fp8_use.fp8 += block->use_fp8(fp8);
    fp8_use.projections += layer.moe.experts > 0 ? 2 : 4;  // the experts' products stay in the compute dtype
    model.add(sites.adapted(std::move(block)));
  }
  model.set_fp8_use(fp8_use);
  if (sparse > 0)
    model.set_moe_routing(
        {c.moe.num_experts, sparse, static_cast<float>(spec::balance_coef(c)), std::move(sparse_layers)});
  model.add(
      sites.frozen(std::make_unique<LlamaHead>(c.hidden_size, c.vocab_size, shape.eps, tp, c.tie_word_embeddings)));
  model.set_vocab_parallel_logits(tp.active());
  model.set_computes_loss(true);  // the head (head_loss)
  sites.check_all_added();
  return model;
}

int64_t llama_parameter_count(const LlamaConfig& cfg) {
  const LlamaConfig c = resolve_llama(cfg);
  const int64_t C = c.hidden_size, D = c.head_dim, F = c.intermediate_size, V = c.vocab_size;
  const int64_t q = c.num_attention_heads * D, qkv = (c.num_attention_heads + 2 * c.num_key_value_heads) * D;
  const int64_t attention = 2 * C + qkv * C + (qkv_biased(c) ? qkv : 0) + q * C + (o_biased(c) ? C : 0) +
                            (spec::qk_norm(c) ? 2 * D : 0) +
                            (spec::qk_norm_whole(c) ? (c.num_attention_heads + c.num_key_value_heads) * D : 0);
  // A sparse layer's MLP: the router (E, C), E experts of 3 F_e C, and a shared expert's 3 Fs C with its gate (C).
  const int64_t E = c.moe.num_experts, Fs = c.moe.shared_expert_intermediate_size;
  const int64_t experts = E * C + E * 3 * c.moe.moe_intermediate_size * C + (Fs > 0 ? 3 * Fs * C + C : 0);
  int64_t blocks = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    blocks += attention + (spec::sparse_layer(c, i) ? experts : 3 * F * C);
  return V * C + blocks + C + (c.tie_word_embeddings ? 0 : V * C);
}

}  // namespace tandem::nn
