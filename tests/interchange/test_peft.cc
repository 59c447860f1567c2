// PEFT interchange: which modules a target list selects (PEFT's suffix rule, "all-linear", a regular expression) and
// the sites and rows they map to, the refusals (the head, the embeddings, a name no module has), PEFT's tensor names,
// the adapter files written and read back, a wrong shape and a stray tensor named, and the merge W + s B A; the
// experts' adapters (target_parameters): their sites, PEFT's nested names, the interleaved B written, read back and
// merged per expert.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tandem/checkpoint/safetensors.h"
#include "tandem/config/config.h"
#include "tandem/core/random_fill.h"
#include "tandem/interchange/peft.h"
#include "tandem/interchange/peft_names.h"
#include "test_util.h"

namespace tandem::interchange {
namespace {

namespace fs = std::filesystem;
using config::Json;
using tandem::testing::error_of;

spec::LlamaConfig llama() {
  spec::LlamaConfig c;
  c.vocab_size = 64;
  c.seq_len = 16;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  return c;
}

spec::GptConfig gpt() { return spec::GptConfig{64, 16, 32, 2, 4, false}; }

spec::LoraConfig targeting(std::vector<std::string> names) {
  spec::LoraConfig l;
  l.enabled = true;
  l.r = 2;
  l.lora_alpha = 6;
  l.target_modules = std::move(names);
  return l;
}

std::vector<std::string> sites_of(const std::vector<LoraSite>& s) {
  std::vector<std::string> out;
  for (const LoraSite& x : s) out.push_back(x.site);
  return out;
}

TEST(PeftNames, TargetsSelectModulesAsPeftDoes) {
  EXPECT_EQ(sites_of(lora_targets(llama(), targeting({"q_proj", "v_proj"}))),
            (std::vector<std::string>{"layers.0.qkv.q", "layers.0.qkv.v", "layers.1.qkv.q", "layers.1.qkv.v"}));
  EXPECT_EQ(sites_of(lora_targets(llama(), targeting({"model.layers.1.mlp.up_proj"}))),
            std::vector<std::string>{"layers.1.gate_up.up"});
  EXPECT_EQ(lora_targets(llama(), targeting({"all-linear"})).size(), 14u);
  spec::LoraConfig regex = targeting({});
  regex.target_regex = R"(.*\.layers\.1\.self_attn\.(k|o)_proj)";
  EXPECT_EQ(sites_of(lora_targets(llama(), regex)), (std::vector<std::string>{"layers.1.qkv.k", "layers.1.o"}));
  // GPT-2: "c_proj" ends two module names (attention's and the MLP's); "mlp.c_proj" only one.
  EXPECT_EQ(sites_of(lora_targets(gpt(), targeting({"c_proj"}))),
            (std::vector<std::string>{"blocks.0.proj", "blocks.0.out", "blocks.1.proj", "blocks.1.out"}));
  EXPECT_EQ(sites_of(lora_targets(gpt(), targeting({"mlp.c_proj"}))),
            (std::vector<std::string>{"blocks.0.out", "blocks.1.out"}));
  // "proj" is not the end of "q_proj" after a dot.
  EXPECT_HAS(error_of([] { lora_targets(llama(), targeting({"proj"})); }), "no module of the model is");
}

TEST(PeftNames, RowsOfTheFusedWeightsAndPeftsTensorNames) {
  const std::vector<LoraSite> s = lora_targets(llama(), targeting({"all-linear"}));
  // q, k, v: rows 0, H D = 32 and (H + Hkv) D = 48 of qkv.weight (D 8); gate and up: rows 0 and F = 48 of gate_up.
  EXPECT_EQ(s[0].module, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(s[1].weight, "layers.0.qkv.weight");
  EXPECT_EQ(s[1].row, 32);
  EXPECT_EQ(s[1].out, 16);
  EXPECT_EQ(s[2].row, 48);
  EXPECT_EQ(s[5].site, "layers.0.gate_up.up");
  EXPECT_EQ(s[5].row, 48);
  EXPECT_EQ(s[6].in, 48);
  EXPECT_EQ(peft_lora_a_name(s[0].module), "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(peft_lora_b_name("transformer.h.0.attn.c_attn"),
            "base_model.model.transformer.h.0.attn.c_attn.lora_B.weight");
  EXPECT_EQ(tandem_lora_a_name(s[0].site), "layers.0.qkv.q.lora_A");
}

TEST(PeftNames, TheHeadAndTheEmbeddingsAreRefusedByName) {
  EXPECT_HAS(error_of([] { lora_targets(llama(), targeting({"lm_head"})); }), "not the embeddings or the head");
  EXPECT_HAS(error_of([] { lora_targets(gpt(), targeting({"wte"})); }), "transformer.wte");
  const std::string e = error_of([] { lora_targets(llama(), targeting({"qproj"})); });
  EXPECT_HAS(e, "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
  spec::LoraConfig all = targeting({});
  all.target_regex = ".*";
  EXPECT_HAS(error_of([&] { lora_targets(llama(), all); }), "narrow the expression");
}

spec::LlamaConfig qwen2_moe() {
  spec::LlamaConfig m = llama();
  m.family = spec::LlamaFamily::Qwen2Moe;
  m.qkv_bias = true;
  m.moe.num_experts = 4;
  m.moe.num_experts_per_tok = 2;
  m.moe.moe_intermediate_size = 16;
  m.moe.shared_expert_intermediate_size = 24;
  m.moe.mlp_only_layers = {1};
  return m;
}

// Qwen2-MoE: gate_proj, up_proj and down_proj select the dense layer's MLP and the sparse layer's shared expert, as
// PEFT matches them in transformers' modules; the shared expert's gate and up are rows of MoeMlp's shared_gate_up.
TEST(PeftNames, Qwen2MoeSharedExpertTakesAdapters) {
  const spec::LlamaConfig m = qwen2_moe();
  EXPECT_EQ(sites_of(lora_targets(m, targeting({"gate_proj", "down_proj"}))),
            (std::vector<std::string>{"layers.0.moe.shared_gate_up.gate", "layers.0.moe.shared_down",
                                      "layers.1.gate_up.gate", "layers.1.down"}));
  const std::vector<LoraSite> s = lora_targets(m, targeting({"shared_expert.up_proj", "shared_expert.down_proj"}));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].module, "model.layers.0.mlp.shared_expert.up_proj");
  EXPECT_EQ(s[0].weight, "layers.0.moe.shared_gate_up.weight");
  EXPECT_EQ(s[0].row, 24);  // below the shared expert's 24 gate rows
  EXPECT_EQ(s[0].in, 32);
  EXPECT_EQ(s[0].out, 24);
  EXPECT_EQ(s[1].weight, "layers.0.moe.shared_down.weight");
  EXPECT_EQ(s[1].in, 24);
  EXPECT_EQ(s[1].out, 32);
  // A sparse layer without a shared expert (Qwen3-MoE) has no MLP module PEFT adapts.
  spec::LlamaConfig q = m;
  q.family = spec::LlamaFamily::Qwen3Moe;
  q.moe.shared_expert_intermediate_size = 0;
  EXPECT_EQ(sites_of(lora_targets(q, targeting({"gate_proj"}))), std::vector<std::string>{"layers.1.gate_up.gate"});
}

// The shared expert's gate, an nn.Linear (C -> 1) in transformers, takes an adapter when named, and "all-linear"
// reaches it as PEFT's does: the 15 modules PEFT adapts in this model.
TEST(PeftNames, Qwen2MoeSharedExpertGateTakesAnAdapter) {
  const spec::LlamaConfig m = qwen2_moe();
  const std::vector<LoraSite> s = lora_targets(m, targeting({"shared_expert_gate"}));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].module, "model.layers.0.mlp.shared_expert_gate");
  EXPECT_EQ(s[0].site, "layers.0.moe.shared_expert_gate");
  EXPECT_EQ(s[0].weight, "layers.0.moe.shared_expert_gate.weight");
  EXPECT_EQ(s[0].in, 32);
  EXPECT_EQ(s[0].out, 1);
  EXPECT_EQ(lora_targets(m, targeting({"all-linear"})).size(), 15u);
  spec::LoraConfig regex = targeting({});
  regex.target_regex = R"(.*shared_expert.*)";
  EXPECT_EQ(lora_targets(m, regex).size(), 4u);
}

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("tandem_peft_test_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// Random adapters for every target of `l` on `m`, in Tandem's names.
std::map<std::string, std::vector<float>> random_adapters(const spec::ModelConfig& m, const spec::LoraConfig& l,
                                                          std::map<std::string, Shape>& shapes) {
  std::map<std::string, std::vector<float>> out;
  uint64_t stream = 0;
  for (const LoraSite& s : lora_targets(m, l))
    for (const auto& [name, shape] : {std::pair<std::string, Shape>{tandem_lora_a_name(s.site), {l.r, s.in}},
                                      {tandem_lora_b_name(s.site), {s.out, l.r}}}) {
      std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
      for (size_t i = 0; i < v.size(); ++i) v[i] = normal_at(3, stream, i);
      ++stream;
      out[name] = v;
      shapes[name] = shape;
    }
  return out;
}

// Every tensor of `values` reads back from `source` with its shape and its values, and nothing else is left in it.
void expect_reads_back(const WeightSource& source, const std::map<std::string, std::vector<float>>& values,
                       const std::map<std::string, Shape>& shapes) {
  std::set<std::string> names;
  for (const auto& [n, v] : values) {
    names.insert(n);
    EXPECT_EQ(source.check(n, shapes.at(n)), "") << n;
    std::vector<float> back(v.size());
    source.read(n, 0, static_cast<int64_t>(v.size()), back.data());
    EXPECT_EQ(back, v) << n;
  }
  EXPECT_TRUE(source.unused(names).empty());
}

TEST(Peft, AdapterFilesRoundTripWithPeftsNamesAndConfig) {
  const TempDir dir;
  spec::LoraConfig l = targeting({"all-linear"});
  std::map<std::string, Shape> shapes;
  const auto adapters = random_adapters(llama(), l, shapes);
  std::map<std::string, HostWeights> host;
  for (const auto& [n, v] : adapters) host[n] = {shapes.at(n), v.data()};
  EXPECT_EQ(write_peft_folder(dir.path(), llama(), l, "base-model", host), 28);
  std::ifstream in(fs::path(dir.path()) / "adapter_config.json");
  const Json cfg = Json::parse(in);
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["base_model_name_or_path"], "base-model");
  EXPECT_EQ(cfg["r"], 2);
  EXPECT_EQ(cfg["lora_alpha"], 6);
  EXPECT_EQ(cfg["bias"], "none");
  EXPECT_EQ(cfg["target_modules"].size(), 14u);  // "all-linear" written as the modules it selected, as PEFT does
  EXPECT_EQ(cfg["target_modules"][0], "model.layers.0.self_attn.q_proj");
  const checkpoint::SafetensorsFile file((fs::path(dir.path()) / "adapter_model.safetensors").string());
  EXPECT_EQ(file.shape("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"), (Shape{2, 48}));
  EXPECT_EQ(file.shape("base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight"), (Shape{16, 2}));
  // Read back in Tandem's names.
  const auto source = open_peft_adapter(dir.path(), llama(), l);
  expect_reads_back(*source, adapters, shapes);
  // Another rank's targets: q and v only leave the rest unused; a rank of 4 is a wrong shape.
  const auto fewer = open_peft_adapter(dir.path(), llama(), targeting({"q_proj", "v_proj"}));
  std::set<std::string> qv;
  for (const char* n :
       {"layers.0.qkv.q.lora_A", "layers.0.qkv.q.lora_B", "layers.0.qkv.v.lora_A", "layers.0.qkv.v.lora_B",
        "layers.1.qkv.q.lora_A", "layers.1.qkv.q.lora_B", "layers.1.qkv.v.lora_A", "layers.1.qkv.v.lora_B"})
    qv.insert(n);
  EXPECT_EQ(fewer->unused(qv).size(), 20u);
  EXPECT_HAS(fewer->check("layers.0.qkv.q.lora_A", {4, 32}), "needs (4, 32)");
  EXPECT_HAS(fewer->check("layers.0.o.lora_A", {2, 32}), "no adapter of lora.target_modules");
}

TEST(Peft, MergeAddsScalingTimesBAToTheAdaptedRowsOnly) {
  spec::LoraConfig l = targeting({"k_proj"});
  l.use_rslora = true;  // scaling 6 / sqrt(2)
  std::map<std::string, Shape> shapes;
  const auto adapters = random_adapters(llama(), l, shapes);
  std::map<std::string, HostWeights> host;
  for (const auto& [n, v] : adapters) host[n] = {shapes.at(n), v.data()};
  std::map<std::string, std::vector<float>> weights;
  std::vector<float> qkv(64 * 32);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = 0.01f * static_cast<float>(i % 97);
  weights["layers.0.qkv.weight"] = qkv;
  weights["layers.1.qkv.weight"] = qkv;
  merge_lora(llama(), l, host, weights);
  const std::vector<float>& a = adapters.at("layers.0.qkv.k.lora_A");  // (2, 32)
  const std::vector<float>& b = adapters.at("layers.0.qkv.k.lora_B");  // (16, 2)
  const double s = 6.0 / std::sqrt(2.0);
  for (int64_t row = 0; row < 64; ++row)
    for (int64_t col = 0; col < 32; ++col) {
      double want = qkv[static_cast<size_t>(row * 32 + col)];
      if (row >= 32 && row < 48)  // k's rows
        for (int64_t k = 0; k < 2; ++k) want += s * b[(row - 32) * 2 + k] * a[k * 32 + col];
      ASSERT_NEAR(weights["layers.0.qkv.weight"][static_cast<size_t>(row * 32 + col)], want, 1e-5)
          << row << ", " << col;
    }
}

// A Qwen3-MoE: layer 0 sparse (4 experts of width 16 over 32 channels), layer 1 dense.
spec::LlamaConfig qwen3_moe() {
  spec::LlamaConfig m = qwen2_moe();
  m.family = spec::LlamaFamily::Qwen3Moe;
  m.qkv_bias = false;
  m.moe.shared_expert_intermediate_size = 0;
  return m;
}

spec::LoraConfig experts_targeted(std::vector<std::string> modules, std::vector<std::string> parameters) {
  spec::LoraConfig l = targeting(std::move(modules));
  l.target_parameters = std::move(parameters);
  return l;
}

// target_parameters selects a sparse layer's stacked gate_up_proj and down_proj by PEFT's suffix rule; with both
// targeted PEFT nests gate_up_proj's wrapper inside down_proj's, so its tensors are named after experts.base_layer.
TEST(PeftNames, TargetParametersSelectTheExpertsWithPeftsNestedNames) {
  const spec::LlamaConfig m = qwen3_moe();
  const std::vector<LoraSite> s =
      lora_targets(m, experts_targeted({"q_proj"}, {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}));
  EXPECT_EQ(sites_of(s), (std::vector<std::string>{"layers.0.qkv.q", "layers.1.qkv.q", "layers.0.moe.gate_up",
                                                   "layers.0.moe.down"}));
  EXPECT_EQ(s[2].module, "model.layers.0.mlp.experts.gate_up_proj");
  EXPECT_EQ(s[2].weight, "layers.0.moe.gate_up.weight");
  EXPECT_EQ(s[2].experts, 4);
  EXPECT_EQ(s[2].in, 32);
  EXPECT_EQ(s[2].out, 32);  // 2F
  EXPECT_EQ(s[3].in, 16);
  EXPECT_EQ(s[3].out, 32);
  EXPECT_EQ(peft_lora_a_name(s[2].peft), "base_model.model.model.layers.0.mlp.experts.base_layer.lora_A.weight");
  EXPECT_EQ(peft_lora_b_name(s[3].peft), "base_model.model.model.layers.0.mlp.experts.lora_B.weight");
  EXPECT_EQ(peft_lora_a_name(s[0].peft), "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  // One of the two: no nesting. target_modules [] adapts no module.
  const std::vector<LoraSite> one = lora_targets(m, experts_targeted({}, {"gate_up_proj"}));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].peft, "model.layers.0.mlp.experts");
  // A name no expert parameter has, and a model without experts, are refused by name.
  const std::string e = error_of([&] { lora_targets(m, experts_targeted({}, {"mlp.experts.gate_proj"})); });
  EXPECT_HAS(e, "'mlp.experts.gate_proj', which no expert parameter of the model is");
  EXPECT_HAS(e, "model.layers.0.mlp.experts.gate_up_proj");
  EXPECT_HAS(error_of([&] { lora_targets(m, experts_targeted({}, {"self_attn.q_proj.weight"})); }),
             "a projection's adapter is target_modules'");
  EXPECT_HAS(error_of([&] { lora_targets(llama(), experts_targeted({}, {"mlp.experts.down_proj"})); }),
             "no mixture-of-experts layer");
  // Qwen2-MoE: the experts beside the shared expert; "down_proj" names the experts' parameter alone (the shared
  // expert's and the dense MLP's are down_proj.weight).
  EXPECT_EQ(sites_of(lora_targets(qwen2_moe(), experts_targeted({"shared_expert.gate_proj"}, {"down_proj"}))),
            (std::vector<std::string>{"layers.0.moe.shared_gate_up.gate", "layers.0.moe.down"}));
}

// The experts' A (E, r, in) is PEFT's (E r, in) as it is; B (E, out, r) is PEFT's (out, r E) with B_e[o, k] at
// [o, k E + e]: a B whose every element is distinct shows the interleaving. Read back, the same tensors.
TEST(Peft, ExpertAdaptersRoundTripWithPeftsInterleavedB) {
  const TempDir dir;
  const spec::LlamaConfig m = qwen3_moe();
  const spec::LoraConfig l = experts_targeted({"o_proj"}, {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"});
  const int64_t E = 4, r = 2;
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, Shape> shapes;
  for (const LoraSite& s : lora_targets(m, l)) {
    const Shape a = s.experts ? Shape{E, r, s.in} : Shape{r, s.in},
                b = s.experts ? Shape{E, s.out, r} : Shape{s.out, r};
    for (const auto& [name, shape] :
         {std::pair<std::string, Shape>{tandem_lora_a_name(s.site), a}, {tandem_lora_b_name(s.site), b}}) {
      std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) + 0.25f * static_cast<float>(values.size());
      values[name] = v;
      shapes[name] = shape;
    }
  }
  std::map<std::string, HostWeights> host;
  for (const auto& [n, v] : values) host[n] = {shapes.at(n), v.data()};
  EXPECT_EQ(write_peft_folder(dir.path(), m, l, "base", host), 8);
  std::ifstream in(fs::path(dir.path()) / "adapter_config.json");
  const Json cfg = Json::parse(in);
  EXPECT_EQ(cfg["target_parameters"], Json({"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}));
  const checkpoint::SafetensorsFile file((fs::path(dir.path()) / "adapter_model.safetensors").string());
  const std::string x = "base_model.model.model.layers.0.mlp.experts.";
  EXPECT_EQ(file.shape(x + "base_layer.lora_A.weight"), (Shape{E * r, 32}));
  EXPECT_EQ(file.shape(x + "base_layer.lora_B.weight"), (Shape{32, r * E}));
  EXPECT_EQ(file.shape(x + "lora_A.weight"), (Shape{E * r, 16}));
  ASSERT_EQ(file.shape(x + "lora_B.weight"), (Shape{32, r * E}));
  const auto* a = static_cast<const float*>(file.data(x + "lora_A.weight"));
  EXPECT_EQ(std::vector<float>(a, a + E * r * 16), values.at("layers.0.moe.down.lora_A"));
  const auto* b = static_cast<const float*>(file.data(x + "lora_B.weight"));  // (out 32, r E)
  const std::vector<float>& mine = values.at("layers.0.moe.down.lora_B");     // (E, 32, r)
  for (int64_t e = 0; e < E; ++e)
    for (int64_t o = 0; o < 32; ++o)
      for (int64_t k = 0; k < r; ++k)
        ASSERT_EQ(b[o * r * E + k * E + e], mine[static_cast<size_t>((e * 32 + o) * r + k)]) << e << o << k;
  const auto source = open_peft_adapter(dir.path(), m, l);
  expect_reads_back(*source, values, shapes);
  EXPECT_HAS(source->check("layers.0.moe.down.lora_B", {E, 32, 4}), "needs (32, 16)");
}

// Each expert's weight W_e += s B_e A_e, every expert its own factors.
TEST(Peft, MergeAddsEachExpertsOwnProduct) {
  const spec::LlamaConfig m = qwen3_moe();
  const spec::LoraConfig l = experts_targeted({}, {"down_proj"});
  const int64_t E = 4, r = 2, C = 32, F = 16;
  std::vector<float> a(static_cast<size_t>(E * r * F)), b(static_cast<size_t>(E * C * r));
  for (size_t i = 0; i < a.size(); ++i) a[i] = normal_at(5, 0, i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = normal_at(5, 1, i);
  std::vector<float> w(static_cast<size_t>(E * C * F));
  for (size_t i = 0; i < w.size(); ++i) w[i] = normal_at(5, 2, i);
  std::map<std::string, std::vector<float>> weights{{"layers.0.moe.down.weight", w}};
  merge_lora(m, l,
             {{"layers.0.moe.down.lora_A", {{E, r, F}, a.data()}}, {"layers.0.moe.down.lora_B", {{E, C, r}, b.data()}}},
             weights);
  const double s = 6.0 / 2.0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t o = 0; o < C; ++o)
      for (int64_t i = 0; i < F; ++i) {
        double want = w[static_cast<size_t>((e * C + o) * F + i)];
        for (int64_t k = 0; k < r; ++k) want += s * b[(e * C + o) * r + k] * a[(e * r + k) * F + i];
        ASSERT_NEAR(weights.at("layers.0.moe.down.weight")[static_cast<size_t>((e * C + o) * F + i)], want, 1e-5)
            << e << ", " << o << ", " << i;
      }
}

}  // namespace
}  // namespace tandem::interchange
