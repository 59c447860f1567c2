// CPU embeddings: token lookup and its scatter-add backward, and learned positions added over the batch, over
// f32, bf16 and f16 tables and activations; the gradients of the table and of the positions are f32 always.
// The backward passes give each output element to one task that sums in row order: no atomics, same bits always.
#include <algorithm>
#include <cstring>

#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cpu/element.h"
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

template <class T>
void forward_kernel(const Tensor& ids, const Tensor& table, const Tensor& y, int64_t start, int64_t vocab) {
  const int64_t n = ids.numel(), v_local = table.dim(0), c = table.dim(1);
  const int32_t* tok = ids.i32();   // (N)
  const T* rows = elems<T>(table);  // (V, C)
  T* out = elems<T>(y);             // (N, C)
  check_ids("embedding_forward", tok, n, vocab);
  if (c == 0) return;
  const size_t row_bytes = static_cast<size_t>(c) * sizeof(T);
#pragma omp parallel for schedule(static) if (worth_parallel(n * c))
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = tok[i] - start;
    if (local >= 0 && local < v_local) {
      std::memcpy(out + i * c, rows + local * c, row_bytes);  // same dtype: the bits, no rounding
    } else {
      std::memset(out + i * c, 0, row_bytes);  // another slot's row: its share of the sum is zero (+0 in every dtype)
    }
  }
}

template <class T>
void backward_kernel(const Tensor& ids, const Tensor& dy, const Tensor& dtable, int64_t start, int64_t vocab) {
  const int64_t n = ids.numel(), v_local = dtable.dim(0), c = dtable.dim(1);
  const int32_t* tok = ids.i32();    // (N)
  const T* g = elems<T>(dy);         // (N, C)
  float* dt = elems<float>(dtable);  // (V, C)
  check_ids("embedding_backward", tok, n, vocab);
  const int64_t chunks = (c + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (worth_parallel(n * c))
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t c0 = chunk * kColumnChunk, width = std::min(kColumnChunk, c - c0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t local = tok[i] - start;
      if (local < 0 || local >= v_local) continue;  // another slot's row
      const T* src = g + i * c + c0;                // (width)
      float* dst = dt + local * c + c0;             // (width)
      for (int64_t j = 0; j < width; ++j) dst[j] += load(src, j);
    }
  }
}

template <class T>
void add_positions_kernel(const Tensor& y, const Tensor& pos) {
  const int64_t b = y.dim(0), t = y.dim(1), c = y.dim(2);
  T* out = elems<T>(y);        // (B, T, C)
  const T* p = elems<T>(pos);  // (T_max, C), rows 0..T-1 used
#pragma omp parallel for schedule(static) if (worth_parallel(b * t * c))
  for (int64_t bt = 0; bt < b * t; ++bt) {
    T* row = out + bt * c;            // (C)
    const T* add = p + (bt % t) * c;  // (C)
    for (int64_t j = 0; j < c; ++j) store(row, j, load(row, j) + load(add, j));
  }
}

template <class T>
void add_positions_backward_kernel(const Tensor& dy, const Tensor& dpos) {
  const int64_t b = dy.dim(0), t = dy.dim(1), c = dy.dim(2);
  const T* g = elems<T>(dy);       // (B, T, C)
  float* dp = elems<float>(dpos);  // (T_max, C), rows 0..T-1 written
  // One task per position, summing the batch in order: deterministic for any thread count.
#pragma omp parallel for schedule(static) if (worth_parallel(b * t * c))
  for (int64_t ti = 0; ti < t; ++ti) {
    float* dst = dp + ti * c;  // (C)
    for (int64_t bi = 0; bi < b; ++bi) {
      const T* src = g + (bi * t + ti) * c;  // (C)
      for (int64_t j = 0; j < c; ++j) dst[j] += load(src, j);
    }
  }
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& y, int64_t start, int64_t vocab) {
  visit_float(table.dtype(), [&](auto t) { forward_kernel<decltype(t)>(ids, table, y, start, vocab); });
}

void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dtable, int64_t start, int64_t vocab) {
  visit_float(dy.dtype(), [&](auto t) { backward_kernel<decltype(t)>(ids, dy, dtable, start, vocab); });
}

void add_positions(const Tensor& y, const Tensor& pos) {
  visit_float(y.dtype(), [&](auto t) { add_positions_kernel<decltype(t)>(y, pos); });
}

void add_positions_backward(const Tensor& dy, const Tensor& dpos) {
  visit_float(dy.dtype(), [&](auto t) { add_positions_backward_kernel<decltype(t)>(dy, dpos); });
}

}  // namespace tandem::ops::cpu
