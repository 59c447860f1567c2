// ModelInfo: what the planner reads off a model built for one tensor-parallel slot: each layer's kind, its
// widths on that slot and its parameter count. It builds the model with train::build_model, the engine's own
// factory, so the layers and their order are the engine's; an unmaterialised model holds no memory, so a
// 70B-class model is as cheap to describe as a toy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/nn/model.h"

namespace tandem::plan {

enum class LayerKind { Embedding, Block, Head, Linear, Activation };

// One model layer on one tp slot. Widths are this slot's (already divided by tp where the layer splits).
struct LayerInfo {
  LayerKind kind = LayerKind::Activation;
  std::string name;
  int64_t params = 0;  // elements this slot holds: the ZeRO unit P_u of the layer
  // Embedding / Block / Head: C is the model dim. Block: heads and C_local = C / tp. Embedding / Head: V / tp.
  int64_t dim = 0, heads = 0, dim_local = 0, vocab_local = 0;
  // Linear: this slot's input and output features.
  int64_t in = 0, out = 0;
  bool sum_forward = false;   // row-parallel linear: its output is summed over tp (Megatron's g)
  bool sum_backward = false;  // column-parallel linear: its input gradient is summed over tp (f)
};

struct ModelInfo {
  std::string type;  // "gpt" | "mlp"
  int tp = 1;
  nn::Model model;  // never materialised: its layers give output shapes and the pipeline partition
  std::vector<LayerInfo> layers;
  int64_t seq_len = 0, vocab = 0, dim = 0, blocks = 0, heads = 0;  // gpt
  int64_t features = 0, classes = 0;                               // mlp
  int64_t logical_parameters = 0;                                  // of the whole model, every slot together

  // One micro-batch of B samples as the dataset hands it over: inputs (B, T) i32 tokens or (B, F) f32
  // features; targets are (B * rows_per_sample()) i32.
  Shape input_shape(int64_t micro) const;
  int64_t rows_per_sample() const { return type == "gpt" ? seq_len : 1; }
};

// Builds `model_cfg` (the config's "model" object) for tp slot 0 of `tp`; every slot holds the same widths.
// Throws Error when the model cannot be split over `tp` (heads, vocabulary or mlp widths not divisible).
ModelInfo describe_model(const config::Json& model_cfg, int tp);

}  // namespace tandem::plan
