// Hugging Face interchange: config.json to and from Tandem's model object, the from_pretrained hook, the name
// maps written by the exporter and read back through a weight source (whole and in shards), and the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "tandem/checkpoint/safetensors.h"
#include "tandem/config/hf_config.h"
#include "tandem/core/error.h"
#include "tandem/interchange/hf_export.h"
#include "tandem/interchange/hf_names.h"
#include "tandem/interchange/weight_source.h"
#include "test_util.h"

namespace tandem::interchange {
namespace {

namespace fs = std::filesystem;
using config::Json;
using tandem::testing::error_of;

// A model object, as a config would hold it, checked and read as the config reads it.
spec::ModelConfig typed(const Json& model) { return config::model_config(config::validate_model(model)); }

Json gpt2_hf() {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", 64},
          {"n_positions", 16},
          {"n_embd", 32},
          {"n_layer", 2},
          {"n_head", 4},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", 0.0},
          {"torch_dtype", "float32"},
          {"bos_token_id", 50256},
          {"transformers_version", "5.0.0"}};
}

Json llama_hf(bool tied) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", 64},
          {"hidden_size", 32},
          {"intermediate_size", 48},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"max_position_embeddings", 16},
          {"rms_norm_eps", 1e-6},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", tied},
          {"rope_parameters", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}};
}

class HfInterchange : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("tandem_hf_test_" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string folder(const std::string& name, const Json& hf_config) const {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    std::ofstream(d / "config.json") << hf_config.dump(2);
    return d.string();
  }

  fs::path dir_;
};

// Random logical weights for every parameter of `model`, in Tandem's names.
std::map<std::string, std::vector<float>> random_weights(const Json& model) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  std::map<std::string, std::vector<float>> out;
  for (const HfMapping& m : hf_name_map(typed(model))) {
    std::vector<float>& v = out[m.name];
    v.resize(static_cast<size_t>(shape_numel(m.shape)));
    for (float& x : v) x = normal(gen);
  }
  return out;
}

std::map<std::string, HostWeights> views(const Json& model, const std::map<std::string, std::vector<float>>& w) {
  std::map<std::string, HostWeights> out;
  for (const HfMapping& m : hf_name_map(typed(model))) out[m.name] = {m.shape, w.at(m.name).data()};
  return out;
}

// Every parameter read back through the folder's weight source equals what was exported.
void expect_round_trip(const std::string& dir, const Json& model, const std::map<std::string, std::vector<float>>& w) {
  const auto source = open_weights(dir, typed(model));
  std::set<std::string> names;
  for (const HfMapping& m : hf_name_map(typed(model))) {
    names.insert(m.name);
    EXPECT_EQ(source->check(m.name, m.shape), "") << m.name;
    std::vector<float> got(w.at(m.name).size());
    // In two ranges, as a rank reading its shard does.
    const auto half = static_cast<int64_t>(got.size() / 2);
    source->read(m.name, 0, half, got.data());
    source->read(m.name, half, static_cast<int64_t>(got.size()), got.data() + half);
    EXPECT_EQ(got, w.at(m.name)) << m.name;
  }
  EXPECT_TRUE(source->unused(names).empty());
}

TEST_F(HfInterchange, Gpt2ConfigBecomesAGptModelAndBack) {
  std::vector<std::string> warnings;
  Json hf = gpt2_hf();
  hf["made_up_key"] = 1;
  hf["attn_pdrop"] = 0.1;
  const Json m = config::model_from_hf_config(hf, "d", &warnings);
  EXPECT_EQ(m, (Json{{"type", "gpt"},
                     {"vocab_size", 64},
                     {"dim", 32},
                     {"layers", 2},
                     {"heads", 4},
                     {"tie_word_embeddings", true}}));
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_HAS(warnings[0], "Tandem does not read these keys: made_up_key");
  EXPECT_HAS(warnings[1], "without dropout; ignored: attn_pdrop");

  Json with_seq = m;
  with_seq["seq_len"] = 16;
  const Json back = config::hf_config_from_model(typed(with_seq), "float32");
  EXPECT_EQ(back.at("n_positions"), 16);
  EXPECT_EQ(back.at("architectures")[0], "GPT2LMHeadModel");
  EXPECT_EQ(config::model_from_hf_config(back, "d"), m);
}

TEST_F(HfInterchange, Gpt2VariantsTandemCannotTrainAreRefusedByName) {
  const auto refused = [](const char* key, const Json& value) {
    Json hf = gpt2_hf();
    hf[key] = value;
    return error_of([&] { config::model_from_hf_config(hf, "d"); });
  };
  EXPECT_HAS(refused("activation_function", "relu"), "activation_function \"relu\"");
  EXPECT_EQ(config::model_from_hf_config(
                [] {
                  Json hf = gpt2_hf();
                  hf["activation_function"] = "gelu_pytorch_tanh";
                  return hf;
                }(),
                "d")
                .at("type"),
            "gpt");
  EXPECT_HAS(refused("n_inner", 100), "n_inner 100");
  EXPECT_HAS(refused("layer_norm_epsilon", 1e-6), "layer_norm_epsilon");
  EXPECT_HAS(refused("scale_attn_by_inverse_layer_idx", true), "scale_attn_by_inverse_layer_idx");
  EXPECT_HAS(refused("reorder_and_upcast_attn", true), "reorder_and_upcast_attn");
  Json t5 = {{"architectures", {"T5ForConditionalGeneration"}}};
  const std::string e = error_of([&] { config::model_from_hf_config(t5, "d"); });
  EXPECT_HAS(e, "'T5ForConditionalGeneration' is not one Tandem trains");
  EXPECT_HAS(e, "GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM");
}

TEST_F(HfInterchange, LlamaFamiliesKeepHuggingFaceKeyNames) {
  const Json m = config::model_from_hf_config(llama_hf(false), "d");
  EXPECT_EQ(m.at("type"), "llama");
  EXPECT_EQ(m.at("num_key_value_heads"), 2);
  EXPECT_EQ(m.at("rope_theta"), 10000.0);
  EXPECT_TRUE(m.at("rope_scaling").is_null());
  EXPECT_FALSE(m.contains("qkv_bias"));

  Json qwen = llama_hf(false);
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  qwen["model_type"] = "qwen2";
  qwen["sliding_window"] = nullptr;
  qwen["use_sliding_window"] = false;
  qwen["max_window_layers"] = 28;
  std::vector<std::string> warnings;
  const Json q = config::model_from_hf_config(qwen, "d", &warnings);
  EXPECT_EQ(q.at("qkv_bias"), true);
  EXPECT_EQ(q.at("attention_bias"), false);
  EXPECT_TRUE(warnings.empty()) << warnings.at(0);

  Json act = llama_hf(false);
  act["hidden_act"] = "gelu";
  EXPECT_HAS(error_of([&] { config::model_from_hf_config(act, "d"); }), "hidden_act \"gelu\"");
  Json bias = llama_hf(false);
  bias["mlp_bias"] = true;
  EXPECT_HAS(error_of([&] { config::model_from_hf_config(bias, "d"); }), "mlp_bias");

  Json with_seq = m;
  with_seq["seq_len"] = 16;
  EXPECT_EQ(config::hf_config_from_model(typed(with_seq), "bfloat16").at("architectures")[0], "LlamaForCausalLM");
  Json qwen_seq = q;
  qwen_seq["seq_len"] = 16;
  EXPECT_EQ(config::hf_config_from_model(typed(qwen_seq), "float32").at("model_type"), "qwen2");
}

TEST_F(HfInterchange, ExportKeepsTheFamilyReadWithItsOwnKeys) {
  Json mistral = llama_hf(false);
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 4096;
  Json m = config::model_from_hf_config(mistral, "d");
  EXPECT_EQ(m.at("family"), "mistral");
  m["seq_len"] = 16;
  const Json hf = config::hf_config_from_model(typed(m), "float32");
  EXPECT_EQ(hf.at("architectures")[0], "MistralForCausalLM");
  EXPECT_EQ(hf.at("model_type"), "mistral");
  EXPECT_EQ(hf.at("sliding_window"), 4096);
  EXPECT_FALSE(hf.contains("attention_bias"));
  // Absent, the window is transformers' default 4096; null stays null.
  mistral.erase("sliding_window");
  EXPECT_EQ(config::model_from_hf_config(mistral, "d").at("sliding_window"), 4096);
  mistral["sliding_window"] = nullptr;
  Json no_window = config::model_from_hf_config(mistral, "d");
  no_window["seq_len"] = 16;
  EXPECT_TRUE(config::hf_config_from_model(typed(no_window), "float32").at("sliding_window").is_null());
  // A window shorter than the training windows would change the attention.
  Json short_window = m;
  short_window["sliding_window"] = 8;
  EXPECT_HAS(error_of([&] { typed(short_window); }), "model.sliding_window (8) is shorter than model.seq_len (16)");

  Json qwen = llama_hf(true);
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  qwen["model_type"] = "qwen2";
  qwen["use_sliding_window"] = false;
  qwen["sliding_window"] = nullptr;
  qwen["max_window_layers"] = 21;
  Json q = config::model_from_hf_config(qwen, "d");
  q["seq_len"] = 16;
  const Json qhf = config::hf_config_from_model(typed(q), "float32");
  EXPECT_EQ(qhf.at("architectures")[0], "Qwen2ForCausalLM");
  EXPECT_EQ(qhf.at("model_type"), "qwen2");
  EXPECT_EQ(qhf.at("use_sliding_window"), false);
  EXPECT_TRUE(qhf.at("sliding_window").is_null());
  EXPECT_EQ(qhf.at("max_window_layers"), 21);
  EXPECT_EQ(qhf.at("tie_word_embeddings"), true);

  // A model written in a config: the family with the others' keys, or without its biases, is refused.
  Json llama = config::model_from_hf_config(llama_hf(false), "d");
  llama["seq_len"] = 16;
  Json with_window = llama;
  with_window["sliding_window"] = 64;
  EXPECT_HAS(error_of([&] { typed(with_window); }), "model.sliding_window is a key of model.family");
  Json qwen_no_bias = q;
  qwen_no_bias["qkv_bias"] = false;
  EXPECT_HAS(error_of([&] { typed(qwen_no_bias); }), "Qwen2's attention has biases on q, k and v");
  // Without "family" (configs and checkpoints from before it), qkv_bias means Qwen2, as exports did then.
  Json old_qwen = llama;
  old_qwen.erase("family");
  old_qwen["qkv_bias"] = true;
  EXPECT_EQ(config::hf_config_from_model(typed(old_qwen), "float32").at("architectures")[0], "Qwen2ForCausalLM");
}

// Qwen3: its head_dim (128 when absent, not hidden_size / heads), attention_bias on all four projections, Qwen2's
// window keys written back as read, q_norm and k_norm in the name map; a window that would apply is refused by name.
TEST_F(HfInterchange, Qwen3KeepsItsKeysAndNormsAndRefusesWindows) {
  Json qwen = llama_hf(false);
  qwen["architectures"] = {"Qwen3ForCausalLM"};
  qwen["model_type"] = "qwen3";
  qwen["attention_bias"] = true;
  qwen["use_sliding_window"] = false;
  qwen["sliding_window"] = nullptr;
  qwen["max_window_layers"] = 1;
  qwen["layer_types"] = {"full_attention", "full_attention"};
  std::vector<std::string> warnings;
  EXPECT_EQ(config::model_from_hf_config(qwen, "d", &warnings).at("head_dim"), 128);
  EXPECT_TRUE(warnings.empty()) << warnings.at(0);
  qwen["head_dim"] = 16;
  Json q = config::model_from_hf_config(qwen, "d");
  EXPECT_EQ(q.at("family"), "qwen3");
  EXPECT_EQ(q.at("head_dim"), 16);
  EXPECT_EQ(q.at("attention_bias"), true);
  EXPECT_FALSE(q.contains("qkv_bias"));
  q["seq_len"] = 16;
  const spec::ModelConfig model = typed(q);
  const Json hf = config::hf_config_from_model(model, "float32");
  EXPECT_EQ(hf.at("architectures")[0], "Qwen3ForCausalLM");
  EXPECT_EQ(hf.at("model_type"), "qwen3");
  EXPECT_EQ(hf.at("head_dim"), 16);
  EXPECT_EQ(hf.at("attention_bias"), true);
  EXPECT_EQ(hf.at("use_sliding_window"), false);
  EXPECT_TRUE(hf.at("sliding_window").is_null());
  EXPECT_EQ(hf.at("max_window_layers"), 1);
  std::map<std::string, Shape> shapes;
  for (const HfMapping& m : hf_name_map(model)) shapes[m.name] = m.shape;
  for (const char* n : {"layers.1.q_norm.weight", "layers.1.k_norm.weight"}) {
    ASSERT_TRUE(shapes.count(n)) << n;
    EXPECT_EQ(shapes.at(n), Shape({16}));
  }
  EXPECT_EQ(shapes.at("layers.0.qkv.weight"), Shape({(4 + 2 * 2) * 16, 32}));
  EXPECT_EQ(shapes.at("layers.0.o.bias"), Shape({32}));
  // A Qwen3 without head_dim in a Tandem config takes hidden_size / heads, and its export names it.
  Json own = q;
  own.erase("head_dim");
  EXPECT_EQ(config::hf_config_from_model(typed(own), "float32").at("head_dim"), 8);

  Json window = qwen;
  window["use_sliding_window"] = true;
  EXPECT_HAS(error_of([&] { config::model_from_hf_config(window, "d"); }), "use_sliding_window is true");
  Json layers = qwen;
  layers["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_HAS(error_of([&] { config::model_from_hf_config(layers, "d"); }), "layer_types holds \"sliding_attention\"");
  Json own_window = q;
  own_window["use_sliding_window"] = true;
  EXPECT_HAS(error_of([&] { typed(own_window); }), "Qwen3 would attend within a sliding window");
  Json qkv_only = q;
  qkv_only["attention_bias"] = false;
  qkv_only["qkv_bias"] = true;
  EXPECT_HAS(error_of([&] { typed(qkv_only); }), "biases on q, k and v alone are Qwen2's form");
  Json moe = qwen;
  moe["architectures"] = {"DeepseekV3ForCausalLM"};
  moe["model_type"] = "deepseek_v3";
  EXPECT_HAS(error_of([&] { config::model_from_hf_config(moe, "d"); }),
             "'DeepseekV3ForCausalLM' is not one Tandem trains");
}

// The mixture-of-experts families: Qwen3-MoE's expert keys with its configuration's defaults (num_local_experts read
// as num_experts), dense and sparse layers by mlp_only_layers, the experts' stacked weights in the name map in the
// Hub's per-expert names, the keys written back; Mixtral's always-renormalised top-k and its refusals.
TEST_F(HfInterchange, MoeFamiliesReadTheirExpertsAndKeepTheirKeys) {
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
  std::map<std::string, HfMapping> maps;
  for (const HfMapping& m : hf_name_map(model)) maps.emplace(m.name, m);
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
  std::map<std::string, HfMapping> mx_maps;
  for (const HfMapping& map : hf_name_map(mx)) mx_maps.emplace(map.name, map);
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

  // Qwen2-MoE: Qwen2's attention (biases on q, k and v), its configuration's expert defaults, the shared expert and its
  // gate in the name map, the keys written back.
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
  std::map<std::string, HfMapping> q2_maps;
  for (const HfMapping& map : hf_name_map(q2)) q2_maps.emplace(map.name, map);
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
  // OLMoE: q and k each normalised over the whole projection (gains of H D), every MLP a mixture of experts of
  // intermediate_size; transformers' padding_idx named in a warning.
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
  std::map<std::string, HfMapping> o_maps;
  for (const HfMapping& map : hf_name_map(om)) o_maps.emplace(map.name, map);
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
  Json unbiased = qwen2;
  unbiased["qkv_bias"] = false;
  EXPECT_HAS(error_of([&] { config::model_from_hf_config(unbiased, "d"); }), "qkv_bias false");
}

TEST_F(HfInterchange, ConflictingRopeKeysAreRefusedNamingBoth) {
  const Json llama3 = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  Json both = llama_hf(false);
  both["rope_parameters"] = llama3;
  both["rope_parameters"]["rope_theta"] = 500000.0;
  both["rope_scaling"] = llama3;
  both["rope_scaling"]["factor"] = 32.0;
  const std::string e = error_of([&] { config::model_from_hf_config(both, "d"); });
  EXPECT_HAS(e, "has both 'rope_parameters' {\"factor\":8.0");
  EXPECT_HAS(e, "and the legacy 'rope_scaling' {\"factor\":32.0");
  EXPECT_HAS(e, "transformers 5 uses rope_scaling");
  // The legacy key says no scaling where rope_parameters says llama3: refused too.
  both["rope_scaling"] = {{"type", "default"}};
  EXPECT_HAS(error_of([&] { config::model_from_hf_config(both, "d"); }), "which disagree");
  // The same scaling in both (the theta given once, at the top level) is one model.
  both["rope_scaling"] = llama3;
  both["rope_parameters"].erase("rope_theta");
  both["rope_theta"] = 500000.0;
  const Json m = config::model_from_hf_config(both, "d");
  EXPECT_EQ(m.at("rope_theta"), 500000.0);
  EXPECT_EQ(m.at("rope_scaling").at("factor"), 8.0);
  // rope_scaling alone, as older files have it, is read as before.
  Json legacy = llama_hf(false);
  legacy.erase("rope_parameters");
  legacy["rope_scaling"] = llama3;
  legacy["rope_theta"] = 500000.0;
  EXPECT_EQ(config::model_from_hf_config(legacy, "d").at("rope_scaling").at("rope_type"), "llama3");
}

TEST_F(HfInterchange, FromPretrainedExpandsFromTheFolderIdempotently) {
  const std::string dir = folder("gpt2", gpt2_hf());
  Json model = {{"from_pretrained", dir}, {"seq_len", 8}};
  config::expand_from_pretrained(model);
  EXPECT_EQ(model.at("type"), "gpt");
  EXPECT_EQ(model.at("dim"), 32);
  EXPECT_EQ(model.at("seq_len"), 8);
  EXPECT_EQ(model.at("from_pretrained"), dir);
  Json again = model;
  config::expand_from_pretrained(again);
  EXPECT_EQ(again, model);

  Json other = {{"from_pretrained", dir}, {"seq_len", 8}, {"dim", 64}};
  EXPECT_HAS(error_of([&] { config::expand_from_pretrained(other); }), "'model.dim' is 64 but");
  Json no_seq = {{"from_pretrained", dir}};
  EXPECT_HAS(error_of([&] { config::expand_from_pretrained(no_seq); }), "model.seq_len");
  Json missing = {{"from_pretrained", (dir_ / "nowhere").string()}, {"seq_len", 8}};
  EXPECT_HAS(error_of([&] { config::expand_from_pretrained(missing); }), "is not a folder");
  fs::create_directories(dir_ / "empty");
  Json empty = {{"from_pretrained", (dir_ / "empty").string()}, {"seq_len", 8}};
  EXPECT_HAS(error_of([&] { config::expand_from_pretrained(empty); }), "has no config.json");

  Json mistral = llama_hf(false);
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["sliding_window"] = 4;
  Json short_window = {{"from_pretrained", folder("mistral", mistral)}, {"seq_len", 8}};
  EXPECT_HAS(error_of([&] { config::expand_from_pretrained(short_window); }), "sliding_window (4)");
}

TEST_F(HfInterchange, Gpt2MapTransposesConv1DWeights) {
  const Json model = {{"type", "gpt"}, {"vocab_size", 64},           {"seq_len", 8}, {"dim", 32}, {"layers", 1},
                      {"heads", 4},    {"tie_word_embeddings", true}};
  const auto maps = hf_name_map(typed(model));
  for (const HfMapping& m : maps) EXPECT_NE(m.name, "head.weight");  // tied: the embedding
  const auto w = random_weights(model);
  const std::string dir = folder("gpt2", gpt2_hf());
  EXPECT_EQ(write_hf_folder(dir, typed(model), views(model, w), {}), 1);
  const checkpoint::SafetensorsFile file((fs::path(dir) / "model.safetensors").string());
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_FALSE(file.contains("lm_head.weight"));
  EXPECT_EQ(file.shape("transformer.h.0.attn.c_attn.weight"), (Shape{32, 96}));
  EXPECT_EQ(file.shape("transformer.wpe.weight"), (Shape{8, 32}));
  const auto* c_attn = static_cast<const float*>(file.data("transformer.h.0.attn.c_attn.weight"));
  const auto& qkv = w.at("blocks.0.qkv.weight");  // (96, 32), as torch.nn.Linear
  for (int o : {0, 33, 95})
    for (int i : {0, 7, 31}) EXPECT_EQ(c_attn[i * 96 + o], qkv[o * 32 + i]);
  expect_round_trip(dir, model, w);
}

TEST_F(HfInterchange, LlamaMapsRoundTripTiedAndUntiedWithBiasesAndShards) {
  for (const bool tied : {false, true})
    for (const char* bias : {"", "qkv_bias", "attention_bias"}) {
      Json model = config::model_from_hf_config(llama_hf(tied), "d");
      model["seq_len"] = 16;
      if (*bias) model[bias] = true;
      if (std::string(bias) == "qkv_bias") model["family"] = "qwen2";  // Qwen2's form alone
      const auto maps = hf_name_map(typed(model));
      const auto qkv = std::find_if(maps.begin(), maps.end(), [](auto& m) { return m.name == "layers.0.qkv.weight"; });
      ASSERT_NE(qkv, maps.end());
      EXPECT_EQ(qkv->shape, (Shape{(4 + 2 * 2) * 8, 32}));
      ASSERT_EQ(qkv->pieces.size(), 3u);
      EXPECT_EQ(qkv->pieces[1].hf_name, "model.layers.0.self_attn.k_proj.weight");
      EXPECT_EQ(qkv->pieces[1].row, 32);
      const auto w = random_weights(model);
      for (const uint64_t shard : {uint64_t{5'000'000'000}, uint64_t{8192}}) {
        const std::string dir =
            folder(std::string("llama") + (tied ? "t" : "u") + bias + std::to_string(shard), llama_hf(tied));
        HfExportOptions o;
        o.max_shard_bytes = shard;
        const int files = write_hf_folder(dir, typed(model), views(model, w), o);
        EXPECT_EQ(files > 1, shard == 8192);
        EXPECT_EQ(fs::exists(fs::path(dir) / "model.safetensors.index.json"), files > 1);
        expect_round_trip(dir, model, w);
      }
    }
}

TEST_F(HfInterchange, RefusalsNameTheTensors) {
  const Json model = {{"type", "gpt"},
                      {"vocab_size", 64},
                      {"seq_len", 16},
                      {"dim", 32},
                      {"layers", 1},
                      {"heads", 4},
                      {"tie_word_embeddings", false}};
  const auto w = random_weights(model);
  const std::string dir = folder("gpt2", gpt2_hf());
  write_hf_folder(dir, typed(model), views(model, w), {});

  // A model with seq_len beyond the file's n_positions, one layer more, another dim.
  Json longer = model;
  longer["seq_len"] = 32;
  EXPECT_HAS(open_weights(dir, typed(longer))->check("wpe.weight", {32, 32}), "n_positions must be at least seq_len");
  Json deeper = model;
  deeper["layers"] = 2;
  EXPECT_HAS(open_weights(dir, typed(deeper))->check("blocks.1.ln1.weight", {32}),
             "missing 'transformer.h.1.ln_1.weight'");
  EXPECT_HAS(open_weights(dir, typed(model))->check("blocks.0.qkv.weight", {96, 16}),
             "is (96, 32) there, (96, 16) here");
  // A tied model does not use lm_head.weight (transformers ties it on load); an untied one does.
  Json tied = model;
  tied["tie_word_embeddings"] = true;
  std::set<std::string> names;
  for (const HfMapping& m : hf_name_map(typed(tied))) names.insert(m.name);
  EXPECT_TRUE(open_weights(dir, typed(tied))->unused(names).empty());
  names.erase("lnf.bias");
  EXPECT_EQ(open_weights(dir, typed(tied))->unused(names), std::vector<std::string>{"transformer.ln_f.bias"});

  // A llama model from a GPT-2 folder; a folder without config.json; an index naming a missing shard.
  Json llama = config::model_from_hf_config(llama_hf(false), "d");
  llama["seq_len"] = 16;
  EXPECT_HAS(error_of([&] { open_weights(dir, typed(llama)); }), "its config.json is of a gpt model");
  fs::create_directories(dir_ / "bare");
  EXPECT_HAS(error_of([&] { open_weights((dir_ / "bare").string(), typed(model)); }), "must be a Hugging Face model");
  const std::string sharded = folder("sharded", gpt2_hf());
  std::ofstream(fs::path(sharded) / "model.safetensors.index.json")
      << Json{{"weight_map", {{"transformer.wte.weight", "model-00001-of-00002.safetensors"}}}}.dump();
  EXPECT_HAS(error_of([&] { open_weights(sharded, typed(model)); }),
             "lacks the shard 'model-00001-of-00002.safetensors'");
  const std::string none = folder("none", gpt2_hf());
  std::ofstream(fs::path(none) / "pytorch_model.bin") << "x";
  EXPECT_HAS(error_of([&] { open_weights(none, typed(model)); }), "pytorch_model.bin");
}

}  // namespace
}  // namespace tandem::interchange
