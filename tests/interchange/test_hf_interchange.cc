// Hugging Face interchange: config.json to and from Tandem's model object, the from_pretrained hook, the name
// maps written by the exporter and read back through a weight source (whole and in shards), and the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "hf_test_util.h"
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
using testing::llama_hf;
using testing::typed;

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
