// The mixture-of-experts families from their config.json and back: each family's expert keys with its configuration
// class's defaults, dense and sparse layers, the experts' stacked weights (and Qwen2-MoE's shared expert, OLMoE's
// whole-projection norms) in the name map under the Hub's names, the keys written back, and each family's refusals.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "hf_test_util.h"
#include "tandem/core/error.h"
#include "test_util.h"

namespace tandem::interchange {
namespace {

using config::Json;
using tandem::testing::error_of;
using testing::llama_hf;
using testing::maps_of;
using testing::typed;

// The mixture-of-experts families: Qwen3-MoE's expert keys with its configuration's defaults (num_local_experts read
// as num_experts), dense and sparse layers by mlp_only_layers, the experts' stacked weights in the name map in the
// Hub's per-expert names, the keys written back; Mixtral's always-renormalised top-k and its refusals.
TEST(HfMoe, Qwen3MoeAndMixtralReadTheirExpertsAndKeepTheirKeys) {
  Json qwen = llama_hf(false);
  qwen["architectures"] = {"Qwen3MoeForCausalLM"};
  qwen["model_type"] = "qwen3_moe";
  qwen["head_dim"] = 8;
  qwen["num_local_experts"] = 4;
  qwen["num_experts_per_tok"] = 2;
  qwen["moe_intermediate_size"] = 16;
  qwen["mlp_only_layers"] = {1};
  std::vector<std::string> warnings;
  Json q = config::model_from_hf_config(qwen, "d", &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.at(0);
  EXPECT_EQ(q.at("family"), "qwen3_moe");
  EXPECT_EQ(q.at("num_experts"), 4);
  EXPECT_EQ(q.at("norm_topk_prob"), false);
  EXPECT_EQ(q.at("output_router_logits"), false);
  q["seq_len"] = 16;
  const spec::ModelConfig model = typed(q);
  const auto& l = std::get<spec::LlamaConfig>(model);
  EXPECT_TRUE(spec::sparse_layer(l, 0));
  EXPECT_FALSE(spec::sparse_layer(l, 1));
  const std::map<std::string, HfMapping> maps = maps_of(model);
  const HfMapping& gate_up = maps.at("layers.0.moe.gate_up.weight");
  EXPECT_EQ(gate_up.shape, Shape({4, 32, 32}));
  ASSERT_EQ(gate_up.pieces.size(), 8u);
  EXPECT_EQ(gate_up.pieces[3].hf_name, "model.layers.0.mlp.experts.1.up_proj.weight");
  EXPECT_EQ(gate_up.pieces[3].row, 48);
  EXPECT_EQ(maps.at("layers.0.moe.down.weight").pieces[2].hf_name, "model.layers.0.mlp.experts.2.down_proj.weight");
  EXPECT_EQ(maps.at("layers.0.moe.router.weight").pieces[0].hf_name, "model.layers.0.mlp.gate.weight");
  EXPECT_TRUE(maps.count("layers.1.gate_up.weight"));
  EXPECT_TRUE(maps.count("layers.0.q_norm.weight"));
  const Json hf = config::hf_config_from_model(model, "float32");
  EXPECT_EQ(hf.at("architectures")[0], "Qwen3MoeForCausalLM");
  EXPECT_EQ(hf.at("num_experts"), 4);
  EXPECT_EQ(hf.at("mlp_only_layers"), Json::array({1}));
  EXPECT_FALSE(hf.contains("max_window_layers"));

  Json mixtral = llama_hf(false);
  mixtral["architectures"] = {"MixtralForCausalLM"};
  mixtral["model_type"] = "mixtral";
  mixtral["num_local_experts"] = 3;
  mixtral["sliding_window"] = nullptr;
  Json m = config::model_from_hf_config(mixtral, "d");
  EXPECT_EQ(m.at("family"), "mixtral");
  EXPECT_EQ(m.at("num_experts_per_tok"), 2);
  EXPECT_EQ(m.at("moe_intermediate_size"), 48);
  EXPECT_EQ(m.at("norm_topk_prob"), true);
  m["seq_len"] = 16;
  const spec::ModelConfig mx = typed(m);
  const std::map<std::string, HfMapping> mx_maps = maps_of(mx);
  EXPECT_EQ(mx_maps.at("layers.1.moe.gate_up.weight").pieces[1].hf_name,
            "model.layers.1.block_sparse_moe.experts.0.w3.weight");
  EXPECT_EQ(config::hf_config_from_model(mx, "float32").at("num_local_experts"), 3);
  Json jitter = mixtral;
  jitter["router_jitter_noise"] = 0.1;
  EXPECT_HAS(error_of([&] { config::model_from_hf_config(jitter, "d"); }), "router_jitter_noise 0.1");
  Json unnormalised = m;
  unnormalised["norm_topk_prob"] = false;
  EXPECT_HAS(error_of([&] { typed(unnormalised); }), "Mixtral always divides");
  Json too_many = m;
  too_many["num_experts_per_tok"] = 4;
  EXPECT_HAS(error_of([&] { typed(too_many); }), "num_experts_per_tok");
  Json dense = q;
  dense["family"] = "qwen3";
  EXPECT_HAS(error_of([&] { typed(dense); }), "model.num_experts is a key of the mixture-of-experts families");
  Json shared_in_qwen3 = q;
  shared_in_qwen3["shared_expert_intermediate_size"] = 16;
  EXPECT_HAS(error_of([&] { typed(shared_in_qwen3); }), "model.shared_expert_intermediate_size is Qwen2-MoE's key");
}

// Qwen2-MoE: Qwen2's attention (biases on q, k and v), its configuration's expert defaults, the shared expert and its
// gate in the name map, the keys written back; qkv_bias false refused.
TEST(HfMoe, Qwen2MoeReadsItsSharedExpert) {
  Json qwen2 = llama_hf(false);
  qwen2["architectures"] = {"Qwen2MoeForCausalLM"};
  qwen2["model_type"] = "qwen2_moe";
  qwen2["num_experts"] = 4;
  qwen2["moe_intermediate_size"] = 16;
  qwen2["shared_expert_intermediate_size"] = 24;
  Json w = config::model_from_hf_config(qwen2, "d");
  EXPECT_EQ(w.at("family"), "qwen2_moe");
  EXPECT_EQ(w.at("qkv_bias"), true);
  EXPECT_EQ(w.at("num_experts_per_tok"), 4);
  EXPECT_EQ(w.at("norm_topk_prob"), false);
  EXPECT_EQ(w.at("shared_expert_intermediate_size"), 24);
  w["seq_len"] = 16;
  const spec::ModelConfig q2 = typed(w);
  const std::map<std::string, HfMapping> q2_maps = maps_of(q2);
  EXPECT_EQ(q2_maps.at("layers.0.moe.shared_expert_gate.weight").pieces[0].hf_name,
            "model.layers.0.mlp.shared_expert_gate.weight");
  const HfMapping& shared = q2_maps.at("layers.1.moe.shared_gate_up.weight");
  EXPECT_EQ(shared.shape, Shape({48, 32}));
  EXPECT_EQ(shared.pieces[1].hf_name, "model.layers.1.mlp.shared_expert.up_proj.weight");
  EXPECT_EQ(q2_maps.at("layers.1.moe.shared_down.weight").pieces[0].hf_name,
            "model.layers.1.mlp.shared_expert.down_proj.weight");
  EXPECT_TRUE(q2_maps.count("layers.0.qkv.bias"));
  const Json q2_hf = config::hf_config_from_model(q2, "float32");
  EXPECT_EQ(q2_hf.at("architectures")[0], "Qwen2MoeForCausalLM");
  EXPECT_EQ(q2_hf.at("shared_expert_intermediate_size"), 24);
  EXPECT_EQ(q2_hf.at("qkv_bias"), true);
  Json unbiased = qwen2;
  unbiased["qkv_bias"] = false;
  EXPECT_HAS(error_of([&] { config::model_from_hf_config(unbiased, "d"); }), "qkv_bias false");
}

// OLMoE: q and k each normalised over the whole projection (gains of H D), every MLP a mixture of experts of
// intermediate_size; transformers' padding_idx named in a warning; clip_qkv and grouped-query attention refused.
TEST(HfMoe, OlmoeNormalisesWholeProjections) {
  Json olmoe = llama_hf(false);
  olmoe["architectures"] = {"OlmoeForCausalLM"};
  olmoe["model_type"] = "olmoe";
  olmoe["num_key_value_heads"] = olmoe["num_attention_heads"];
  olmoe["num_experts"] = 4;
  olmoe["num_experts_per_tok"] = 2;
  olmoe["pad_token_id"] = 1;
  std::vector<std::string> olmoe_warnings;
  Json o = config::model_from_hf_config(olmoe, "d", &olmoe_warnings);
  ASSERT_EQ(olmoe_warnings.size(), 1u);
  EXPECT_HAS(olmoe_warnings[0], "keeps the embedding row of pad_token_id 1 fixed");
  EXPECT_EQ(o.at("moe_intermediate_size"), o.at("intermediate_size"));
  EXPECT_EQ(o.at("router_aux_loss_coef"), 0.01);
  o["seq_len"] = 16;
  const spec::ModelConfig om = typed(o);
  const std::map<std::string, HfMapping> o_maps = maps_of(om);
  EXPECT_EQ(o_maps.at("layers.0.q_norm.weight").shape, Shape({32}));
  EXPECT_EQ(o_maps.at("layers.1.k_norm.weight").pieces[0].hf_name, "model.layers.1.self_attn.k_norm.weight");
  EXPECT_TRUE(o_maps.count("layers.1.moe.router.weight"));
  EXPECT_EQ(config::hf_config_from_model(om, "float32").at("architectures")[0], "OlmoeForCausalLM");
  Json clipped = olmoe;
  clipped["clip_qkv"] = 8.0;
  EXPECT_HAS(error_of([&] { config::model_from_hf_config(clipped, "d"); }), "clip_qkv 8.0");
  Json grouped = o;
  grouped["num_key_value_heads"] = 2;
  EXPECT_HAS(error_of([&] { typed(grouped); }), "grouped-query OLMoE is not built yet");
}

}  // namespace
}  // namespace tandem::interchange
