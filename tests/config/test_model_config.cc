// Tests of the model families as the config types them (model_config.h): the llama keys, defaults, refusals and
// messages; what each family tells the data, the trainer and the planner; and the layout checks.
#include <gtest/gtest.h>

#include <variant>

#include "tandem/config/config.h"
#include "tandem/core/error.h"
#include "tandem/spec/model_config.h"
#include "test_util.h"

namespace tandem::config {
namespace {

using tandem::testing::error_of;

// Llama 3.2 1B's config.json, less the keys that say nothing about the model's function.
Json llama_1b() {
  return Json::parse(R"({"type": "llama", "seq_len": 2048, "vocab_size": 128256, "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": true, "attention_bias": false, "mlp_bias": false, "hidden_act": "silu"})");
}

Json small_llama() {
  return Json::parse(R"({"type": "llama", "seq_len": 16, "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4})");
}

Json with_model(Json model) { return Json{{"train_batch_size", 8}, {"model", std::move(model)}}; }

LlamaConfig llama_of(Json model) { return std::get<LlamaConfig>(parse(validate(with_model(std::move(model)))).model); }

std::string model_error(Json model) {
  return error_of([&] { validate(with_model(std::move(model))); });
}

TEST(Llama, HuggingFaceKeysAreRead) {
  const LlamaConfig c = llama_of(llama_1b());
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.seq_len, 2048);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_hidden_layers, 16);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000);
  EXPECT_EQ(c.rope_scaling.type, RopeType::Llama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
}

TEST(Llama, Defaults) {
  const Json v = validate(with_model(small_llama()));
  const LlamaConfig c = std::get<LlamaConfig>(parse(v).model);
  EXPECT_EQ(c.num_key_value_heads, 4);       // = num_attention_heads
  EXPECT_EQ(c.head_dim, 16);                 // hidden_size / num_attention_heads
  EXPECT_EQ(c.max_position_embeddings, 16);  // seq_len
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000);
  EXPECT_EQ(c.rope_scaling.type, RopeType::None);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  // The defaults are written into the validated config, which is saved beside checkpoints.
  EXPECT_EQ(v["model"]["num_key_value_heads"], 4);
  EXPECT_EQ(v["model"]["head_dim"], 16);
  EXPECT_TRUE(v["model"]["rope_scaling"].is_null());
  EXPECT_EQ(v["model"]["hidden_act"], "silu");
  EXPECT_EQ(validate(v), v) << "validate must be idempotent";
  EXPECT_EQ(model_type(c), "llama");
}

TEST(Llama, HeadDimMayDifferFromHiddenOverHeads) {
  Json m = small_llama();
  m["hidden_size"] = 60;  // not a multiple of 8 heads, but head_dim is given
  m["num_attention_heads"] = 8;
  m["head_dim"] = 16;
  EXPECT_EQ(llama_of(m).head_dim, 16);
  m.erase("head_dim");
  const std::string msg = model_error(m);
  EXPECT_HAS(msg, "model.hidden_size (60) is not divisible by model.num_attention_heads (8)");
  EXPECT_HAS(msg, "divisor of 60 (e.g. 6), or give head_dim");
}

TEST(Llama, KeyValueHeadsDivideHeads) {
  Json m = llama_1b();
  m["num_key_value_heads"] = 6;
  EXPECT_HAS(model_error(m),
             "model.num_attention_heads (32) is not divisible by model.num_key_value_heads (6): each key/value head "
             "serves an equal group of query heads; set num_key_value_heads to a divisor of 32 (e.g. 4)");
}

TEST(Llama, SeqLenWithinMaxPositions) {
  Json m = small_llama();
  m["max_position_embeddings"] = 8;
  EXPECT_HAS(model_error(m),
             "model.seq_len (16) exceeds model.max_position_embeddings (8): lower seq_len to at most 8 or raise "
             "max_position_embeddings");
}

TEST(Llama, RopeScaling) {
  Json m = llama_1b();
  m["rope_scaling"] = nullptr;
  EXPECT_EQ(llama_of(m).rope_scaling.type, RopeType::None);

  m = llama_1b();
  m["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_HAS(model_error(m),
             "model.rope_scaling.rope_type 'yarn' is not supported: Tandem scales rope only as Llama 3 does; use "
             "\"llama3\" or set \"rope_scaling\": null");
  m["rope_scaling"]["rope_type"] = "linear";
  EXPECT_HAS(model_error(m), "model.rope_scaling.rope_type 'linear' is not supported");

  m = llama_1b();
  m["rope_scaling"].erase("low_freq_factor");
  EXPECT_HAS(model_error(m), "missing required config key 'model.rope_scaling.low_freq_factor'");

  m = llama_1b();
  m["rope_scaling"].erase("rope_type");
  m["rope_scaling"]["type"] = "llama3";  // transformers' older spelling, which it still reads
  const Json v = validate(with_model(m));
  EXPECT_EQ(v["model"]["rope_scaling"]["rope_type"], "llama3");
  EXPECT_FALSE(v["model"]["rope_scaling"].contains("type"));
  EXPECT_EQ(std::get<LlamaConfig>(parse(v).model).rope_scaling.type, RopeType::Llama3);
  m["rope_scaling"]["rope_type"] = "llama3";  // both spellings: "type" is then an unknown key
  EXPECT_HAS(model_error(m), "unknown key 'model.rope_scaling.type'");

  m = llama_1b();
  m["rope_scaling"].erase("rope_type");
  EXPECT_HAS(model_error(m), "missing required config key 'model.rope_scaling.rope_type'");

  m = llama_1b();
  m["rope_scaling"]["low_freq_factor"] = 4.0;
  EXPECT_HAS(model_error(m), "model.rope_scaling.low_freq_factor (4) must be lower than high_freq_factor (4)");

  m = llama_1b();
  m["rope_scaling"]["factor"] = 0.5;
  EXPECT_HAS(model_error(m), "config key 'model.rope_scaling.factor' must be");
}

TEST(Llama, HuggingFaceKeysOfOneForm) {
  Json m = small_llama();
  m["mlp_bias"] = true;
  EXPECT_HAS(model_error(m), "model.mlp_bias true is not supported");
  m = small_llama();
  m["hidden_act"] = "gelu";
  EXPECT_HAS(model_error(m),
             "model.hidden_act 'gelu' is not supported: Tandem's llama MLP is SwiGLU, gated by silu; set "
             "\"hidden_act\": \"silu\"");
  m["hidden_act"] = "silu";
  m["mlp_bias"] = false;
  EXPECT_EQ(llama_of(m).hidden_size, 64);
}

TEST(Llama, MisspelledAndOtherFamiliesKeys) {
  Json m = small_llama();
  m["num_attention_head"] = 4;
  EXPECT_HAS(model_error(m), "unknown key 'model.num_attention_head': did you mean 'model.num_attention_heads'?");
  m = small_llama();
  m["rope_thetta"] = 1e4;
  EXPECT_HAS(model_error(m), "did you mean 'model.rope_theta'?");
  m = small_llama();
  m["heads"] = 4;
  EXPECT_HAS(model_error(m), "unknown key 'model.heads' for model type 'llama': only another type uses it");
  m = small_llama();
  m.erase("intermediate_size");
  EXPECT_HAS(model_error(m), "missing required config key 'model.intermediate_size'");
  m = small_llama();
  m.erase("seq_len");
  EXPECT_HAS(model_error(m), "missing required config key 'model.seq_len'");
  // And the gpt's and mlp's keys are not llama's.
  Json g = Json::parse(R"({"type": "gpt", "vocab_size": 256, "seq_len": 16, "dim": 32, "layers": 2, "heads": 4})");
  g["num_hidden_layers"] = 2;
  EXPECT_HAS(model_error(g), "unknown key 'model.num_hidden_layers' for model type 'gpt'");
}

TEST(Llama, TokenDataOnly) {
  Json cfg = with_model(small_llama());
  cfg["data"] = {{"type", "text"}, {"path", "corpus.txt"}};
  EXPECT_NO_THROW(validate(cfg));
}

TEST(Llama, WhatTheModelConsumesAndCosts) {
  const LlamaConfig c = llama_of(llama_1b());
  const ModelIO io = model_io(c);
  EXPECT_TRUE(io.tokens);
  EXPECT_EQ(io.seq_len, 2048);
  EXPECT_EQ(io.vocab_size, 128256);
  EXPECT_EQ(rows_per_sample(c), 2048);
  // 12 L (H head_dim) T per token, as for a gpt with d = H head_dim.
  EXPECT_DOUBLE_EQ(extra_flops_per_row(c), 12.0 * 16 * (32 * 64) * 2048);
}

TEST(Llama, AMixtureOfExpertsCostsTheExpertsATokenReaches) {
  // Qwen3-MoE's shape cut to 4 layers, the second dense (mlp_only_layers): 3 sparse layers whose tokens reach 8 of 128
  // experts of 3 C F parameters each, so 6 x the other 120 experts' parameters come off the attention's 12 L d T.
  Json m = Json::parse(R"({"type": "llama", "family": "qwen3_moe", "seq_len": 256, "vocab_size": 1024,
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "num_experts": 128, "num_experts_per_tok": 8,
    "moe_intermediate_size": 96, "mlp_only_layers": [1]})");
  const LlamaConfig c = llama_of(m);
  EXPECT_DOUBLE_EQ(extra_flops_per_row(c), 12.0 * 4 * (4 * 64) * 256 - 6.0 * 3 * 120 * 3 * 256 * 96);
}

TEST(Llama, LayoutChecks) {
  const LlamaConfig c = llama_of(llama_1b());  // 32 heads, 8 kv heads, 16 layers, vocab 128256, mlp 8192
  EXPECT_NO_THROW(check_layout(c, 1, 8, 1, {}));
  EXPECT_EQ(error_of([&] { check_layout(c, 1, 16, 1, {}); }),
            "model.num_attention_heads 32 and model.num_key_value_heads 8 are not both divisible by parallel.tensor "
            "16: each tensor-parallel slot holds whole query and key/value heads; choose a tensor width that divides "
            "8");
  LlamaConfig odd_vocab = c;
  odd_vocab.vocab_size = 128257;
  EXPECT_EQ(error_of([&] { check_layout(odd_vocab, 1, 2, 1, {}); }),
            "model.vocab_size 128257 is not divisible by parallel.tensor 2: pad the vocabulary to a multiple of 2 "
            "(e.g. 128258)");
  LlamaConfig odd_mlp = c;
  odd_mlp.intermediate_size = 8190;
  EXPECT_HAS(error_of([&] { check_layout(odd_mlp, 1, 4, 1, {}); }),
             "model.intermediate_size 8190 is not divisible by parallel.tensor 4");
  // OLMoE's q and k norms each span every head: tp runs where the heads divide, its sums joining the slots.
  LlamaConfig olmoe = c;
  olmoe.family = spec::LlamaFamily::Olmoe;
  olmoe.num_key_value_heads = 32;
  EXPECT_NO_THROW(check_layout(olmoe, 1, 2, 1, {}));
  EXPECT_NO_THROW(check_layout(olmoe, 2, 4, 1, {}));
  // Pipeline stages cut between decoder layers; the embedding and the head are units too.
  EXPECT_NO_THROW(check_layout(c, 18, 1, 1, {}));
  EXPECT_EQ(error_of([&] { check_layout(c, 19, 1, 1, {}); }),
            "model.num_hidden_layers 16 (plus the embedding and the head) cannot fill 19 pipeline stages (pipeline 19 "
            "x virtual_stages 1): use fewer stages or more layers");
  EXPECT_NO_THROW(check_layout(c, 2, 1, 1, {{0, 9}, {10, 15}}));
  EXPECT_EQ(error_of([&] {
              check_layout(c, 2, 1, 1, {{0, 9}, {10, 14}});
            }),
            "parallel.stages covers decoder layers 0..14 but the model has 16 decoder layers");
  EXPECT_HAS(error_of([&] {
               check_layout(c, 2, 1, 1, {{0, 9}, {11, 15}});
             }),
             "parallel.stages must cover decoder layers 0..15 in order");
  // A mixture of experts with its balance loss in the loss runs on pipelines: the sums travel with each micro-batch.
  LlamaConfig moe = c;
  moe.family = spec::LlamaFamily::Qwen3Moe;
  moe.moe.num_experts = 8;
  moe.moe.num_experts_per_tok = 2;
  moe.moe.moe_intermediate_size = 1024;
  moe.moe.output_router_logits = true;
  EXPECT_NO_THROW(check_layout(moe, 4, 1, 2, {}));
}

TEST(Gpt, LayoutMessagesNameBlocks) {
  const GptConfig g{256, 16, 32, 4, 4};
  EXPECT_EQ(error_of([&] {
              check_layout(g, 2, 1, 1, {{0, 1}, {2, 2}});
            }),
            "parallel.stages covers blocks 0..2 but the model has 4 blocks");
  EXPECT_DOUBLE_EQ(extra_flops_per_row(g), 12.0 * 4 * 32 * 16);
}

}  // namespace
}  // namespace tandem::config
