// Cutting a model's layers into the contiguous chunks (global pipeline stages) of a pipeline.
#pragma once

#include <utility>
#include <vector>

#include "tandem/nn/model.h"

namespace tandem::parallel::pipeline {

using LayerRange = std::pair<size_t, size_t>;  // [first, last)

// `chunks` contiguous, non-empty ranges covering every layer, balanced by parameter count (the largest
// chunk as small as it can be); a layer without parameters (an activation) stays with the layer before it.
std::vector<LayerRange> balance_by_parameters(const nn::Model& model, int chunks);

// A gpt cut by an explicit map of block ranges ([first, last] inclusive, in block indices): the embedding
// joins the first chunk and the head the last. `blocks_begin` is the model layer of block 0.
std::vector<LayerRange> gpt_stage_map(const nn::Model& model, const std::vector<std::pair<int64_t, int64_t>>& blocks,
                                      size_t blocks_begin = 1);

}  // namespace tandem::parallel::pipeline
