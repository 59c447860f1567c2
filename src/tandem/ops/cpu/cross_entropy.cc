// CPU softmax cross-entropy: per-row loss and log-sum-exp (forward), the logits gradient (backward), and the
// per-slot statistics of the vocabulary-sharded form. One row per task; exp sums are max-subtracted, in double.
#include <algorithm>
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Targets come from the dataset, so a bad one is the user's to fix. Checked before the parallel loops, since an
// exception must not leave an OpenMP region.
void check_targets(const char* op, const int32_t* targets, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] >= 0 && targets[i] < vocab) continue;
    if (vocab == kUncheckedVocab) TANDEM_FAIL(op, ": target id ", targets[i], " at row ", i, " is negative");
    TANDEM_FAIL(op, ": target id ", targets[i], " at row ", i, " is out of range for a vocabulary of ", vocab,
                " (targets must lie in [0, ", vocab, ")); check that the tokenizer matches the model's vocab_size");
  }
}

// sum_j exp(row[j] - shift) over a row of v logits: float exps, a double sum so 50k terms lose nothing.
double sum_exp(const float* row, int64_t v, float shift) {
  double sum = 0.0;
  for (int64_t j = 0; j < v; ++j) sum += std::exp(row[j] - shift);
  return sum;
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse) {
  const int64_t n = rows_of(logits), v = cols_of(logits);
  const float* x = logits.f32();       // (N, V)
  const int32_t* tgt = targets.i32();  // (N)
  float* loss = losses.f32();          // (N)
  float* lse_out = lse.f32();          // (N)
  check_targets("cross_entropy_forward", tgt, n, v);
#pragma omp parallel for schedule(static) if (n * v >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * v;  // (V)
    const float mx = *std::max_element(row, row + v);
    const double row_lse = static_cast<double>(mx) + std::log(sum_exp(row, v, mx));
    lse_out[i] = static_cast<float>(row_lse);
    loss[i] = static_cast<float>(row_lse - row[tgt[i]]);
  }
}

void cross_entropy_stats(const Tensor& logits, const Tensor& targets, int64_t start, int64_t vocab,
                         const Tensor& row_max, const Tensor& target_logit) {
  const int64_t n = rows_of(logits), v_local = cols_of(logits);
  const float* x = logits.f32();       // (N, V_local)
  const int32_t* tgt = targets.i32();  // (N)
  float* mx = row_max.f32();           // (N)
  float* picked = target_logit.f32();  // (N)
  check_targets("cross_entropy_stats", tgt, n, vocab);
#pragma omp parallel for schedule(static) if (n * v_local >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * v_local;  // (V_local)
    mx[i] = *std::max_element(row, row + v_local);
    const int64_t local = tgt[i] - start;
    // Zero from the slots that do not hold the target, so a sum over slots yields the target's logit.
    picked[i] = local >= 0 && local < v_local ? row[local] : 0.0f;
  }
}

void row_sum_exp(const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp_out) {
  const int64_t n = rows_of(logits), v = cols_of(logits);
  const float* x = logits.f32();    // (N, V_local)
  const float* mx = row_max.f32();  // (N)
  float* out = sum_exp_out.f32();   // (N)
#pragma omp parallel for schedule(static) if (n * v >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(sum_exp(x + i * v, v, mx[i]));
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale,
                            const Tensor& dlogits, int64_t start, int64_t vocab) {
  const int64_t n = rows_of(logits), v = cols_of(logits);
  const float* x = logits.f32();       // (N, V_local)
  const int32_t* tgt = targets.i32();  // (N)
  const float* row_lse = lse.f32();    // (N)
  float* g = dlogits.f32();            // (N, V_local), may be the same memory as x
  check_targets("cross_entropy_backward", tgt, n, vocab);
#pragma omp parallel for schedule(static) if (n * v >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * v;  // (V_local)
    float* out = g + i * v;        // (V_local)
    // Each element reads only its own logit before writing, so out == row is safe.
    for (int64_t j = 0; j < v; ++j) out[j] = scale * std::exp(row[j] - row_lse[i]);
    const int64_t local = tgt[i] - start;
    if (local >= 0 && local < v) out[local] -= scale;
  }
}

}  // namespace tandem::ops::cpu
