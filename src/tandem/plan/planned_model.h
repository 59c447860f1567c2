// PlannedModel: what the planner needs to run a model on the counting device: how to build it for a
// tensor-parallel slot (the engine's own builder: the config's factory, or a model made of custom layers through
// the C++ API), what one micro-batch of its input looks like, and how its work is reported.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tandem/layout/layout.h"
#include "tandem/nn/model.h"
#include "tandem/spec/fp8.h"
#include "tandem/spec/lora.h"
#include "tandem/spec/model_config.h"

namespace tandem::plan {

struct PlannedModel {
  std::function<nn::Model(nn::TpSlot)> build;
  Shape sample_shape;              // one sample's input: (T) token ids or (F) features
  DType input_dtype = DType::F32;  // I32 tokens or F32 features
  int64_t rows_per_sample = 1;     // rows of the loss per sample: T for a language model, 1 for a classifier
  std::string type = "model";      // what `tandem plan` calls it: "gpt", "mlp", or a custom model's name
  const char* unit = "samples/s";  // what tokens_per_s counts: "tok/s" or "samples/s"
  // Model FLOPs per loss row on top of 6 x parameters (spec::extra_flops_per_row: the attention's 12 L d T per token,
  // less the experts a token does not reach).
  double extra_flops_per_row = 0;
  // Throws Error (with what to change) when the layout cannot hold the model: heads, vocabulary or widths not
  // divisible by tp, a stage map that does not cover the layers; and with `micro` samples a micro-batch (0: not chosen
  // yet), when FP8 cannot scale a context shard's tokens as one device does. Null: only what building the model checks.
  std::function<void(const layout::ParallelPlan& plan, int64_t micro, int64_t micro_batches)> validate;
  // Whether its optimizer state and parameters may be offloaded: not under LoRA, which the config refuses with
  // offload (only the adapters train; the frozen base stays on the device).
  bool offloadable = true;

  // One micro-batch of `micro` samples: (micro, sample_shape...).
  Shape input_shape(int64_t micro) const;
};

// The model a config names, built by the engine's factory (train::build_model), with the config's LoRA adapters.
PlannedModel planned_model(const spec::ModelConfig& model, const spec::LoraConfig& lora = {},
                           const spec::Fp8Config& fp8 = {});

}  // namespace tandem::plan
