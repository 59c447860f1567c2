// The rotary position embedding's host tables (rope_tables.h). The frequencies follow transformers' fp32 tensor
// arithmetic step by step: `a / tensor` is its reciprocal times a (torch's __rtruediv__), `tensor / a` a division,
// every intermediate rounded to fp32.
#include "tandem/ops/rope_tables.h"

#include <cmath>

#include "tandem/core/error.h"

namespace tandem::ops {

std::vector<float> rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling) {
  TANDEM_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim ", head_dim,
               " must be positive and even (the rotation pairs dims i and i + head_dim/2)");
  TANDEM_CHECK(std::isfinite(theta) && theta > 0.0, "rope: rope_theta ", theta, " must be a positive number");
  const int64_t half = head_dim / 2;
  std::vector<float> f(static_cast<size_t>(half));  // (D/2)
  // 1 / theta^(arange(0, D, 2) / D)
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    f[i] = 1.0f / std::pow(base, exponent);
  }
  if (scaling.rope_type == "default") return f;
  TANDEM_CHECK(scaling.rope_type == "llama3", "rope: rope_type \"", scaling.rope_type,
               "\" is not supported; use \"default\" (no scaling) or \"llama3\"");
  const RopeScaling& s = scaling;
  TANDEM_CHECK(std::isfinite(s.factor) && s.factor > 0.0, "rope: llama3 factor ", s.factor,
               " must be a positive number (Llama 3.1 uses 8)");
  TANDEM_CHECK(s.low_freq_factor > 0.0 && s.high_freq_factor > s.low_freq_factor, "rope: llama3 low_freq_factor ",
               s.low_freq_factor, " and high_freq_factor ", s.high_freq_factor,
               " must satisfy 0 < low_freq_factor < high_freq_factor (Llama 3.1 uses 1 and 4)");
  TANDEM_CHECK(s.original_max_position_embeddings > 0, "rope: llama3 original_max_position_embeddings ",
               s.original_max_position_embeddings, " must be positive (Llama 3.1 uses 8192)");
  const float factor = static_cast<float>(s.factor);
  const float low = static_cast<float>(s.low_freq_factor);
  const float old_len = static_cast<float>(s.original_max_position_embeddings);
  // Python floats, compared with fp32 tensors (so rounded to fp32).
  const double old_len_d = static_cast<double>(s.original_max_position_embeddings);
  const float low_wavelength = static_cast<float>(old_len_d / s.low_freq_factor);
  const float high_wavelength = static_cast<float>(old_len_d / s.high_freq_factor);
  const float band = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  const float two_pi = static_cast<float>(2.0 * M_PI);
  for (float& freq : f) {
    const float wavelength = (1.0f / freq) * two_pi;
    const float scaled = wavelength > low_wavelength ? freq / factor : freq;  // low frequencies: divided by factor
    const float smooth = ((1.0f / wavelength) * old_len - low) / band;
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelength < high_wavelength) && !(wavelength > low_wavelength);
    freq = medium ? smoothed : scaled;
  }
  return f;
}

RopeTables rope_tables(const std::vector<float>& inverse_frequencies, int64_t positions) {
  TANDEM_CHECK(!inverse_frequencies.empty(), "rope_tables: no inverse frequencies (head_dim / 2 of them expected)");
  TANDEM_CHECK(positions >= 0, "rope_tables: negative number of positions ", positions);
  RopeTables r;
  r.positions = positions;
  r.half = static_cast<int64_t>(inverse_frequencies.size());
  r.cos.resize(static_cast<size_t>(positions * r.half));
  r.sin.resize(r.cos.size());
  for (int64_t t = 0; t < positions; ++t)
    for (int64_t i = 0; i < r.half; ++i) {
      const float angle = inverse_frequencies[i] * static_cast<float>(t);  // one fp32 product
      r.cos[t * r.half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      r.sin[t * r.half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  return r;
}

void copy_rope_tables(const RopeTables& tables, const Tensor& cos, const Tensor& sin) {
  const Shape want{tables.positions, tables.half};
  for (const Tensor* t : {&cos, &sin}) {
    TANDEM_CHECK(t->defined() && t->dtype() == DType::F32 && t->shape() == want,
                 "copy_rope_tables: ", t == &cos ? "cos " : "sin ",
                 t->defined() ? shape_str(t->shape()) : std::string("(undefined)"),
                 " is not an f32 tensor of the tables' shape ", shape_str(want));
  }
  cos.copy_from_host(tables.cos.data());
  sin.copy_from_host(tables.sin.data());
}

}  // namespace tandem::ops
