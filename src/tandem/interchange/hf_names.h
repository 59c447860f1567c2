// Tandem's parameter names and Hugging Face's, per model family. Each Tandem logical parameter is filled by one
// or more Hugging Face tensors, each covering a block of its rows (Llama's q, k and v projections make the rows
// of Tandem's one qkv weight), stored as Tandem stores it or transposed (GPT-2's Conv1D keeps (in, out)).
#pragma once

#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/spec/model_config.h"

namespace tandem::interchange {

// One Hugging Face tensor filling rows [row, row + rows) of a Tandem parameter (hf_columns gives its rows).
struct HfPiece {
  std::string hf_name;
  int64_t row = 0;
  int64_t rows = 0;
  // Hugging Face stores the transpose: element (r, c) of the Tandem rows is element (c, r) of its tensor.
  bool transposed = false;
  // Hugging Face's tensor may hold more rows; Tandem takes the first `rows` (GPT-2's position embedding holds
  // n_positions rows, Tandem seq_len).
  bool leading_rows = false;
};

struct HfMapping {
  std::string name;  // Tandem's logical parameter
  Shape shape;       // its logical shape
  std::vector<HfPiece> pieces;
};

// The columns of a parameter's rows: its last dim, 1 for a vector. Its rows are the rest, flattened: an (E, R, C)
// stack of experts' matrices has E R rows, expert e's R rows after the first e's.
int64_t hf_columns(const Shape& shape);

// Every parameter of `model` (gpt or llama) with its Hugging Face sources, in the order the model lists them; a
// tied head has no entry (it is the embedding).
std::vector<HfMapping> hf_name_map(const spec::ModelConfig& model);

// The Hugging Face tensor name that a tied head may still be saved under ("lm_head.weight").
const char* hf_tied_head_name();

// Buffers Hugging Face checkpoints may hold that are not parameters (GPT-2's causal masks attn.bias and
// attn.masked_bias, rotary inv_freq): ignored when reading.
bool is_hf_buffer(const std::string& hf_name);

// The shape `piece` has in Hugging Face's file for a Tandem parameter of `shape` (for leading_rows, the
// fewest rows it may have).
Shape hf_piece_shape(const HfPiece& piece, const Shape& shape);

// The flat index in the piece's Hugging Face tensor (of shape `hf_shape`) of Tandem's element `index`, which
// lies in the piece's rows.
int64_t hf_index(const HfPiece& piece, const Shape& shape, const Shape& hf_shape, int64_t index);

// The piece holding element `index` of a mapping.
const HfPiece& piece_of(const HfMapping& m, int64_t index);

}  // namespace tandem::interchange
