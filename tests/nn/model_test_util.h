// What the model tests share: random token batches, the mean loss with or without gradients, and the directional
// gradient check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tandem/core/random_fill.h"
#include "tandem/device/cpu_device.h"
#include "tandem/nn/llama.h"
#include "tandem/nn/loss.h"
#include "tandem/nn/model.h"

namespace tandem::testing {

using nn::cross_entropy_sum_and_grad;
using nn::Model;
using nn::Saved;

// A small decoder: C 16, 4 query heads over 2 kv heads of D 4, F 24, V 13, T 6, 2 layers.
inline nn::LlamaConfig small_llama() {
  nn::LlamaConfig c;
  c.vocab_size = 13;
  c.seq_len = 6;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  return c;
}

inline Tensor random_tokens(device::CpuDevice& dev, Shape shape, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::I32, dev, "tokens");
  for (int64_t i = 0; i < t.numel(); ++i) t.i32()[i] = static_cast<int32_t>(bits64_at(seed, 1, i) % vocab);
  return t;
}

// Mean cross-entropy of the model on (x, y); with `grads`, also accumulates d(loss)/d(params).
// `batch`: what the micro-batch brings besides x (its place in the run, for LoRA's dropout masks).
inline double loss_of(nn::Model& model, const Tensor& x, const Tensor& y, bool grads, bool recompute = false,
                      const nn::Batch& batch = {}) {
  std::vector<nn::Saved> saved;
  const size_t layers = model.layers().size();
  Tensor logits = model.forward_range(0, layers, x, saved, recompute, nullptr, batch);
  const double sum = nn::cross_entropy_sum_and_grad(logits, y, static_cast<double>(y.numel()));
  if (grads) model.backward_range(0, layers, logits, saved, recompute, nullptr, batch);
  return sum / static_cast<double>(y.numel());
}

// Checks the analytic directional derivative g.u against central differences (step h) of the loss along random
// directions u over all parameters at once (robust to fp32 rounding of the loss, unlike per-element checks).
inline void check_directional_derivatives(nn::Model& model, const Tensor& x, const Tensor& y, double h = 1e-3) {
  model.zero_grad();
  loss_of(model, x, y, true);
  const Tensor& theta = model.flat_values();
  const Tensor& grad = model.flat_grads();
  const int64_t P = theta.numel();
  std::vector<float> base(theta.f32(), theta.f32() + P);
  for (uint64_t trial = 0; trial < 3; ++trial) {
    std::vector<float> u(P);
    double analytic = 0;
    for (int64_t i = 0; i < P; ++i) {
      u[i] = normal_at(99, trial, i);
      analytic += static_cast<double>(grad.f32()[i]) * u[i];
    }
    auto shifted = [&](double s) {
      for (int64_t i = 0; i < P; ++i) theta.f32()[i] = static_cast<float>(base[i] + s * u[i]);
      return loss_of(model, x, y, false);
    };
    const double numeric = (shifted(h) - shifted(-h)) / (2 * h);
    for (int64_t i = 0; i < P; ++i) theta.f32()[i] = base[i];
    EXPECT_NEAR(analytic, numeric, 2e-3 * std::fabs(numeric) + 1e-4) << "direction " << trial;
  }
}

}  // namespace tandem::testing
