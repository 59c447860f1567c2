// The time model's built-in GPU rates against steps measured on a GPU (docs/benchmarks.md): the preflight's
// predicted step of each run's own config, planned on the counting device for a CUDA run with the GPU's free memory
// of the measurement, within 10% of the measured step. Attention is most of a long sequence's step, so these check its
// forward and backward rates at head dim 128; the short run checks they still fit where the products dominate.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tandem/config/config.h"
#include "tandem/plan/preflight.h"

namespace tandem {
namespace {

using config::Json;

constexpr int64_t kGiB = int64_t{1} << 30;

// The Llama-3-8B shape (32 query heads of 128 over 8), `layers` of them, one sequence of t tokens a step in bf16.
Json llama_8b_shape(int layers, int64_t t, int batch, int micro) {
  return {{"model",
           {{"type", "llama"},
            {"vocab_size", 128256},
            {"seq_len", t},
            {"max_position_embeddings", t},
            {"hidden_size", 4096},
            {"num_hidden_layers", layers},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 8},
            {"intermediate_size", 14336},
            {"rope_theta", 500000},
            {"tie_word_embeddings", false}}},
          {"data", {{"type", "synthetic"}}},
          {"train_batch_size", batch},
          {"train_micro_batch_size_per_gpu", micro},
          {"bf16", {{"enabled", true}}},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-4}}}}}};
}

// bench/gpu_long_context.sh's long runs: inputs in host memory, attention kept for the recomputation.
Json long_run(int layers, int64_t t) {
  Json json = llama_8b_shape(layers, t, 1, 1);
  json["parallel"] = {{"activation_checkpointing", true}, {"cpu_checkpointing", true}, {"keep_attention", true}};
  return json;
}

struct Measured {
  const char* what;
  Json config;
  double free_gib;  // the GPU's free memory the run's preflight planned against
  double step_s;    // measured
};

double predicted_step(const Measured& m) {
  const config::TrainConfig tc = config::parse(config::validate(m.config), 1);
  plan::PreflightOptions o;
  o.backend = plan::Backend::Cuda;
  o.cpu_threads = 1;
  o.device_free_bytes = static_cast<uint64_t>(m.free_gib * static_cast<double>(kGiB));
  o.suggest = false;
  const plan::PreflightResult r = plan::preflight(tc, layout::resolve_parallel(tc.parallel, 1), o);
  EXPECT_TRUE(r.fits) << m.what << ": " << r.message;
  return r.time.step_s;
}

TEST(TimeModelMeasured, StepsWithinTenPercent) {
  Json lora = long_run(32, 65536);
  lora["lora"] = {{"r", 16},
                  {"lora_alpha", 32},
                  {"target_modules", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}};
  const Measured runs[] = {
      // On an H100 (2026-12-06): 10,422 tok/s with the preflight's 8 GiB blocks.
      {"8 layers, one sequence of 128k", long_run(8, 131072), 76.7, 131072.0 / 10422},
      // On an H100 (2026-12-06): 4,708 tok/s.
      {"32 layers with LoRA, one sequence of 64k", lora, 76.7, 65536.0 / 4708},
      // On an H200 (2026-12-04): 41,000 tok/s, 16 sequences of 2,048 a step in micro-batches of 4.
      {"8 layers, 16 sequences of 2k", llama_8b_shape(8, 2048, 16, 4), 139.0, 16 * 2048.0 / 41000},
  };
  for (const Measured& m : runs) {
    const double predicted = predicted_step(m);
    std::printf("%s: predicted %.2f s, measured %.2f s (%+.1f%%)\n", m.what, predicted, m.step_s,
                100 * (predicted / m.step_s - 1));
    EXPECT_NEAR(predicted, m.step_s, 0.1 * m.step_s) << m.what;
  }
}

}  // namespace
}  // namespace tandem
