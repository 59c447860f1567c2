// CPU embeddings: token lookup and its scatter-add backward, and learned positions added over the batch.
// The backward passes give each output element to one task that sums in row order: no atomics, same bits always.
#include <algorithm>
#include <cstring>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cpu {
namespace {

// Columns per task of the scatter-add: every task walks all ids but owns only its strip of dtable's columns.
constexpr int64_t kColumnChunk = 64;

// Ids come from user data (a tokenizer, a dataset file), so a bad one is reported, not asserted. Checked before
// any parallel loop, since an exception must not leave an OpenMP region.
void check_ids(const char* op, const int32_t* ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < vocab) continue;
    if (vocab == kUncheckedVocab) TANDEM_FAIL(op, ": token id ", ids[i], " at row ", i, " is negative");
    TANDEM_FAIL(op, ": token id ", ids[i], " at row ", i, " is out of range for a vocabulary of ", vocab,
                " (ids must lie in [0, ", vocab, ")); check that the tokenizer matches the model's vocab_size");
  }
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& y, int64_t start, int64_t vocab) {
  const int64_t n = ids.numel(), v_local = table.dim(0), c = table.dim(1);
  const int32_t* tok = ids.i32();   // (N)
  const float* rows = table.f32();  // (V, C)
  float* out = y.f32();             // (N, C)
  check_ids("embedding_forward", tok, n, vocab);
  if (c == 0) return;
#pragma omp parallel for schedule(static) if (n * c >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = tok[i] - start;
    if (local >= 0 && local < v_local) {
      std::memcpy(out + i * c, rows + local * c, static_cast<size_t>(c) * sizeof(float));
    } else {
      std::fill(out + i * c, out + (i + 1) * c, 0.0f);  // another slot's row: its share of the sum is zero
    }
  }
}

void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dtable, int64_t start, int64_t vocab) {
  const int64_t n = ids.numel(), v_local = dtable.dim(0), c = dtable.dim(1);
  const int32_t* tok = ids.i32();  // (N)
  const float* g = dy.f32();       // (N, C)
  float* dt = dtable.f32();        // (V, C)
  check_ids("embedding_backward", tok, n, vocab);
  const int64_t chunks = (c + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (n * c >= kParallelMinElements)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t c0 = chunk * kColumnChunk, width = std::min(kColumnChunk, c - c0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t local = tok[i] - start;
      if (local < 0 || local >= v_local) continue;  // another slot's row
      const float* src = g + i * c + c0;            // (width)
      float* dst = dt + local * c + c0;             // (width)
      for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
    }
  }
}

void add_positions(const Tensor& y, const Tensor& pos) {
  const int64_t b = y.dim(0), t = y.dim(1), c = y.dim(2);
  float* out = y.f32();        // (B, T, C)
  const float* p = pos.f32();  // (T_max, C), rows 0..T-1 used
#pragma omp parallel for schedule(static) if (b * t * c >= kParallelMinElements)
  for (int64_t bt = 0; bt < b * t; ++bt) {
    float* row = out + bt * c;            // (C)
    const float* add = p + (bt % t) * c;  // (C)
    for (int64_t j = 0; j < c; ++j) row[j] += add[j];
  }
}

void add_positions_backward(const Tensor& dy, const Tensor& dpos) {
  const int64_t b = dy.dim(0), t = dy.dim(1), c = dy.dim(2);
  const float* g = dy.f32();  // (B, T, C)
  float* dp = dpos.f32();     // (T_max, C), rows 0..T-1 written
  // One task per position, summing the batch in order: deterministic for any thread count.
#pragma omp parallel for schedule(static) if (b * t * c >= kParallelMinElements)
  for (int64_t ti = 0; ti < t; ++ti) {
    float* dst = dp + ti * c;  // (C)
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* src = g + (bi * t + ti) * c;  // (C)
      for (int64_t j = 0; j < c; ++j) dst[j] += src[j];
    }
  }
}

}  // namespace tandem::ops::cpu
