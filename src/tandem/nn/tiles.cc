#include "tandem/nn/tiles.h"

#include <algorithm>

namespace tandem::nn {

int64_t loss_chunk_rows(int64_t set, int64_t rows, int64_t v_local, DType dtype) {
  const int64_t whole = std::max<int64_t>(rows, 1);
  if (set > 0) return std::min(whole, set);
  const int64_t per_row = std::max<int64_t>(v_local * static_cast<int64_t>(dtype_size(dtype)), 1);
  return std::clamp<int64_t>(kLossChunkBytes / per_row, 1, whole);
}

int64_t mlp_tile_rows(int64_t set, int64_t rows, int64_t f_local, DType dtype) {
  const int64_t whole = std::max<int64_t>(rows, 1);
  if (set > 0) return std::min(whole, set);
  const int64_t per_row = std::max<int64_t>(4 * f_local * static_cast<int64_t>(dtype_size(dtype)), 1);
  if (whole * per_row <= kMlpTileBytes) return whole;
  return std::max(kMlpTileQuantum, kMlpTileBytes / per_row / kMlpTileQuantum * kMlpTileQuantum);
}

}  // namespace tandem::nn
