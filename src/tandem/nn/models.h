// The models a config can name, built through the same public API a user's own model uses.
#pragma once

#include <string>
#include <vector>

#include "tandem/nn/lora.h"
#include "tandem/nn/model.h"
#include "tandem/nn/tensor_parallel.h"
#include "tandem/spec/fp8.h"
#include "tandem/spec/models.h"

namespace tandem::nn {

// A classifier: Linear(sizes[0] -> sizes[1]), activation, ..., Linear(-> sizes.back()), no activation
// after the last. Parameters "layers.<i>.{weight,bias}". Tensor-parallel: linears pair up as column- then
// row-parallel (the activation between them works on slices); an unpaired last linear is replicated.
using MlpConfig = spec::MlpConfig;
Model build_mlp(const MlpConfig& cfg, TpSlot tp = {});

// GPT-2 style: the same function as the PyTorch reference (pre-LN, learned positions, fused qkv with bias,
// GELU-tanh MLP of 4*dim, final LN, head without bias: its own weight, or with tie_word_embeddings the embedding
// table, as Hugging Face's GPT-2).
using GptConfig = spec::GptConfig;
// With `lora`, every parameter is frozen and LoRA adapters are added at its sites (GptBlock::add_lora).
// `fp8`: the blocks' projections run in FP8 where their shapes allow (Model::fp8_use counts them).
Model build_gpt(const GptConfig& cfg, TpSlot tp = {}, const LoraTargets* lora = nullptr,
                const spec::Fp8Config& fp8 = {});
// V*C + T*C + L*(12 C^2 + 13 C) + 2C (+ V*C untied), computed without building the model.
int64_t gpt_parameter_count(const GptConfig& cfg);

}  // namespace tandem::nn
