// The rotary position embedding's tables, made on the host: the inverse frequencies of a head dim (transformers'
// "default" and Llama 3's "llama3" rope types) and the cos/sin tables (T, D/2) f32 that rotary_forward and
// rotary_backward (ops.h) read.
// Legend: D head dim, T positions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::ops {

// transformers' `rope_scaling` (absent or rope_type "default": no scaling). For "llama3", as in its
// _compute_llama3_parameters: frequencies whose wavelength 2 pi / f exceeds original_max_position_embeddings /
// low_freq_factor are divided by `factor`, those under original_max_position_embeddings / high_freq_factor are kept,
// and those between are interpolated with s = (original_max_position_embeddings / wavelength - low_freq_factor) /
// (high_freq_factor - low_freq_factor): f' = (1 - s) f / factor + s f. Defaults are Llama 3.1's.
struct RopeScaling {
  std::string rope_type = "default";  // "default" or "llama3"
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// The D/2 inverse frequencies f_i = 1 / theta^(2i / D) of a head dim (rope_theta = theta), then scaled as `scaling`
// says. Computed in fp32 in transformers' order of operations, so the values agree with its inv_freq buffer to an ulp
// or so (std::pow and torch.pow may round differently). Throws Error for an odd or non-positive head dim, theta <= 0,
// an unknown rope_type or llama3 parameters it cannot use.
std::vector<float> rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling = {});

// cos and sin (T, D/2) f32, row-major: angle[t, i] = f_i * t formed in fp32 (as transformers' fp32 product
// inv_freq @ position_ids), then its cosine and sine rounded to fp32. Positions 0..T-1.
struct RopeTables {
  int64_t positions = 0, half = 0;  // T, D/2
  std::vector<float> cos, sin;      // (T, D/2) each
};
RopeTables rope_tables(const std::vector<float>& inverse_frequencies, int64_t positions);

// The tables copied into f32 tensors cos and sin (T, D/2) on any device (an upload when the device is a GPU).
void copy_rope_tables(const RopeTables& tables, const Tensor& cos, const Tensor& sin);

}  // namespace tandem::ops
