// CPU softmax cross-entropy: per-row loss and log-sum-exp (forward), the logits gradient (backward), and the
// per-slot statistics of the vocabulary-sharded form with its finish. Rows whose target is kIgnoreTarget count
// nothing: no loss, no gradient. Logits and their gradient are f32, bf16 or
// f16; every per-row statistic is f32. One row per task; exp sums are max-subtracted, in double.
#include <algorithm>
#include <cmath>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Targets come from the dataset, so a bad one is the user's to fix. Checked before the parallel loops, since an
// exception must not leave an OpenMP region.
void check_targets(const char* op, const int32_t* targets, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    if ((targets[i] >= 0 && targets[i] < vocab) || targets[i] == kIgnoreTarget) continue;
    if (vocab == kUncheckedVocab) TANDEM_FAIL(op, ": target id ", targets[i], " at row ", i, " is negative");
    TANDEM_FAIL(op, ": target id ", targets[i], " at row ", i, " is out of range for a vocabulary of ", vocab,
                " (targets must lie in [0, ", vocab, ")); check that the tokenizer matches the model's vocab_size");
  }
}

// sum_j exp(row[j] - shift) over a row of v logits: float exps, a double sum so 50k terms lose nothing.
template <class T>
double sum_exp(const T* row, int64_t v, float shift) {
  double sum = 0.0;
  for (int64_t j = 0; j < v; ++j) sum += std::exp(load(row, j) - shift);
  return sum;
}

template <class T>
float row_max_of(const T* row, int64_t v) {
  float mx = load(row, 0);
  for (int64_t j = 1; j < v; ++j) mx = std::max(mx, load(row, j));
  return mx;
}

template <class T>
void forward_kernel(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse) {
  const int64_t n = rows_of(logits), v = cols_of(logits);
  const T* x = elems<T>(logits);       // (N, V)
  const int32_t* tgt = targets.i32();  // (N)
  float* loss = elems<float>(losses);  // (N)
  float* lse_out = elems<float>(lse);  // (N)
  check_targets("cross_entropy_forward", tgt, n, v);
#pragma omp parallel for schedule(static) if (worth_parallel(n * v, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i) {
    const T* row = x + i * v;  // (V)
    const float mx = row_max_of(row, v);
    const double row_lse = static_cast<double>(mx) + std::log(sum_exp(row, v, mx));
    lse_out[i] = static_cast<float>(row_lse);
    loss[i] = tgt[i] == kIgnoreTarget ? 0.0f : static_cast<float>(row_lse - load(row, tgt[i]));
  }
}

template <class T>
void stats_kernel(const Tensor& logits, const Tensor& targets, int64_t start, int64_t vocab, const Tensor& row_max,
                  const Tensor& target_logit) {
  const int64_t n = rows_of(logits), v_local = cols_of(logits);
  const T* x = elems<T>(logits);               // (N, V_local)
  const int32_t* tgt = targets.i32();          // (N)
  float* mx = elems<float>(row_max);           // (N)
  float* picked = elems<float>(target_logit);  // (N)
  check_targets("cross_entropy_stats", tgt, n, vocab);
#pragma omp parallel for schedule(static) if (worth_parallel(n * v_local))
  for (int64_t i = 0; i < n; ++i) {
    const T* row = x + i * v_local;  // (V_local)
    mx[i] = row_max_of(row, v_local);
    const int64_t local = tgt[i] == kIgnoreTarget ? -1 : tgt[i] - start;
    // Zero from the slots that do not hold the target, so a sum over slots yields the target's logit.
    picked[i] = local >= 0 && local < v_local ? load(row, local) : 0.0f;
  }
}

template <class T>
void row_sum_exp_kernel(const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp_out) {
  const int64_t n = rows_of(logits), v = cols_of(logits);
  const T* x = elems<T>(logits);            // (N, V_local)
  const float* mx = elems<float>(row_max);  // (N)
  float* out = elems<float>(sum_exp_out);   // (N)
#pragma omp parallel for schedule(static) if (worth_parallel(n * v, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(sum_exp(x + i * v, v, mx[i]));
}

template <class T>
void backward_kernel(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale, const Tensor& dlogits,
                     int64_t start, int64_t vocab) {
  const int64_t n = rows_of(logits), v = cols_of(logits);
  const T* x = elems<T>(logits);             // (N, V_local)
  const int32_t* tgt = targets.i32();        // (N)
  const float* row_lse = elems<float>(lse);  // (N)
  T* g = elems<T>(dlogits);                  // (N, V_local), may be the same memory as x
  check_targets("cross_entropy_backward", tgt, n, vocab);
#pragma omp parallel for schedule(static) if (worth_parallel(n * v, kTranscendentalCost))
  for (int64_t i = 0; i < n; ++i) {
    const T* row = x + i * v;       // (V_local)
    T* out = g + i * v;             // (V_local)
    if (tgt[i] == kIgnoreTarget) {  // a row that does not count: no gradient
      for (int64_t j = 0; j < v; ++j) store(out, j, 0.0f);
      continue;
    }
    const int64_t local = tgt[i] - start;
    // Each element reads only its own logit before writing, so out == row is safe. The one-hot is subtracted
    // before the store, so the target's gradient is rounded once, like the others.
    for (int64_t j = 0; j < v; ++j) {
      const float p = scale * std::exp(load(row, j) - row_lse[i]);
      store(out, j, j == local ? p - scale : p);
    }
  }
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse) {
  visit_float(logits.dtype(), [&](auto t) { forward_kernel<decltype(t)>(logits, targets, losses, lse); });
}

void cross_entropy_stats(const Tensor& logits, const Tensor& targets, int64_t start, int64_t vocab,
                         const Tensor& row_max, const Tensor& target_logit) {
  visit_float(logits.dtype(),
              [&](auto t) { stats_kernel<decltype(t)>(logits, targets, start, vocab, row_max, target_logit); });
}

void row_sum_exp(const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp_out) {
  visit_float(logits.dtype(), [&](auto t) { row_sum_exp_kernel<decltype(t)>(logits, row_max, sum_exp_out); });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale,
                            const Tensor& dlogits, int64_t start, int64_t vocab) {
  visit_float(logits.dtype(),
              [&](auto t) { backward_kernel<decltype(t)>(logits, targets, lse, scale, dlogits, start, vocab); });
}

void cross_entropy_finish(const Tensor& row_max, const Tensor& target_logit, const Tensor& lse, const Tensor& targets,
                          const Tensor& loss_sum) {
  const int64_t n = lse.numel();
  const float* mx = row_max.f32();           // (N)
  const float* picked = target_logit.f32();  // (N)
  const int32_t* tgt = targets.i32();        // (N)
  float* out = lse.f32();                    // (N): sum_exp in, log-sum-exp out
  // One pass in row order with a double sum: the total does not depend on threads, and N (tokens of one step) is
  // small next to the N x V work that produced these statistics.
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double row_lse = static_cast<double>(mx[i]) + std::log(static_cast<double>(out[i]));
    out[i] = static_cast<float>(row_lse);
    if (tgt[i] != kIgnoreTarget) total += row_lse - picked[i];
  }
  float* sum = loss_sum.f32();  // (1)
  sum[0] = static_cast<float>(static_cast<double>(sum[0]) + total);
}

}  // namespace tandem::ops::cpu
