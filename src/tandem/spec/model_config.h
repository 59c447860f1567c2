// The model families a config can name, as typed values (no JSON), and what a model's family alone decides: the data
// it consumes, the loss rows of a sample, the planner's FLOPs beyond 6 x parameters, and whether a layout can hold
// it. This file and train/model_factory.cc (which builds each family through nn) are the only places that tell the
// families apart: a new one is one more alternative of ModelConfig, a case in each function of model_config.cc
// (std::visit makes a missing one a compile error) and a case in the factory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tandem/spec/context_attention.h"
#include "tandem/spec/models.h"

namespace tandem::spec {

using ModelConfig = std::variant<MlpConfig, GptConfig, LlamaConfig>;

// What a model reads and predicts: token sequences (tokens: seq_len ids below vocab_size) or feature vectors and
// classes. A model built in code states its own (data::make_dataset takes it).
struct ModelIO {
  bool tokens = false;
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
  int64_t features = 0;
  int64_t classes = 0;
};

// The config's "model.type": "mlp", "gpt" or "llama".
std::string model_type(const ModelConfig& model);

ModelIO model_io(const ModelConfig& model);

// Rows of the loss one sample gives: its seq_len tokens for a language model, 1 for a classifier.
int64_t rows_per_sample(const ModelConfig& model);

// Model FLOPs per loss row on top of 6 x parameters: the attention, 12 L d T per token with d the width of the
// heads (a gpt's dim, a llama's num_attention_heads x head_dim), less 6 x the experts' parameters a token does not
// reach (E - k of a sparse layer's E, each 3 C F); 0 for an mlp.
double extra_flops_per_row(const ModelConfig& model);

// Throws Error, saying what to change, when the model cannot be cut into `pp` x `virtual_stages` pipeline chunks
// (by the stage map `stages` of gpt blocks or llama decoder layers when given, inclusive [first, last] ranges) and
// split over `tp` tensor-parallel slots (heads, key/value heads, vocabulary and the llama MLP's width; the widths
// between paired mlp linears).
void check_layout(const ModelConfig& model, int pp, int tp, int virtual_stages,
                  const std::vector<std::pair<int64_t, int64_t>>& stages);

// Throws Error, saying what to change, when each sequence cannot be split over `cp` context-parallel shards: seq_len
// into 2 cp equal chunks, and under `attention` Heads each of the `tp` slots' query and key/value heads over the cp
// shards (heads_split: attention's all-to-all regroups by heads; auto and ring take any heads). Gpt and the Llama
// family only.
void check_context(const ModelConfig& model, int cp, int tp, ContextAttention attention);

// The attention a split of the model's sequences over `cp` shards runs beside `tp` slots under `request`
// (context_attention_used on a slot's heads): Heads or Ring; Heads without a split (cp 1) or for an mlp.
ContextAttention context_attention_of(const ModelConfig& model, int cp, int tp, ContextAttention request);

// Throws Error, saying what to change, when the experts cannot be spread over `ep` expert-parallel slots: the model
// must have mixture-of-experts layers and ep must divide their number of experts.
void check_experts(const ModelConfig& model, int ep);

}  // namespace tandem::spec
