// How many rows (tokens) the long-sequence passes take at once: the loss's chunks of logits (nn/loss.h's head_loss)
// and a block's MLP tiles (LlamaBlock). A whole-sequence pass holds T x V logits and T x 3F MLP intermediates, which
// at T 128k are tens of GB; in chunks and tiles only one is held at a time. The rules are here, once; the config's
// "tiles" (spec/tiles.h) overrides them, and the engine hands it to the layers with each micro-batch (batch.h).
#pragma once

#include <cstdint>

#include "tandem/core/dtype.h"
#include "tandem/spec/tiles.h"

namespace tandem::nn {

using spec::Tiles;

// At most this many bytes of logits at once (a 128,256-token vocabulary in bf16: 2,092 rows).
inline constexpr int64_t kLossChunkBytes = int64_t{512} << 20;
// Rows of logits per chunk: `set` when given, else as many as kLossChunkBytes holds; at least one, at most `rows`.
int64_t loss_chunk_rows(int64_t set, int64_t rows, int64_t v_local, DType dtype);

// At most this many bytes of MLP intermediates at once: gate_up (2F), its SwiGLU (F) and that one's gradient (F) a
// row, F this slot's width.
inline constexpr int64_t kMlpTileBytes = int64_t{1} << 30;
// Products of fewer rows than this run below the matrix units' rate; tiles are multiples of it (FP8's scale tiles too).
inline constexpr int64_t kMlpTileQuantum = 128;
// Rows per MLP tile: `set` when given, else the most rows, in multiples of kMlpTileQuantum, whose intermediates fit
// in kMlpTileBytes; `rows` (one tile: the whole pass) when they all fit.
int64_t mlp_tile_rows(int64_t set, int64_t rows, int64_t f_local, DType dtype);

}  // namespace tandem::nn
