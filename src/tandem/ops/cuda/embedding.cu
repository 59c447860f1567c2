// CUDA embeddings: token lookup and its deterministic scatter-add backward, and learned positions.
// The backward sorts (id, position) pairs with a stable radix sort, so the rows of one id end up in position order;
// one block per distinct id then sums its rows in that order. No atomics: the same bits on every run.
#include <climits>
#include <cub/device/device_radix_sort.cuh>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr const char* kForwardWhat = "embedding_forward: token id";
constexpr const char* kBackwardWhat = "embedding_backward: token id";
constexpr const char* kVocabHint = "; check that the tokenizer matches the model's vocab_size";

// y (N, units) = table row (id - start) for ids in this slot, zeros for other slots' ids and for bad ids (reported).
// U is one element or one 16-byte pack: a copy needs no arithmetic, so the dtype does not matter, only the size.
template <class U>
__global__ void gather_rows_kernel(const int32_t* __restrict__ ids, const U* __restrict__ table, U* __restrict__ y,
                                   int64_t n, int64_t units, int64_t start, int64_t v_local, int64_t vocab,
                                   device::DeferredError* err, uint64_t what, uint64_t hint) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t total = n * units;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t row = e / units, col = e - row * units;
    const int64_t id = ids[row];
    if (id < 0 || id >= vocab) {
      if (col == 0) report_bad_value(err, what, hint, row, id, vocab);
      y[e] = U{};
      continue;
    }
    const int64_t local = id - start;
    y[e] = local >= 0 && local < v_local ? table[local * units + col] : U{};
  }
}

__global__ void iota_kernel(int32_t* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = static_cast<int32_t>(i);
}

// One block per sorted index s; only the first index of each run of equal ids works: it sums dy over the run's
// positions (ascending, as the sort is stable) for every column and adds the sums to dtable's row.
// keys, pos (N) sorted; dy (N, C) in T; dtable (V_local, C) f32.
template <class T>
__global__ void scatter_runs_kernel(const int32_t* __restrict__ keys, const int32_t* __restrict__ pos,
                                    const T* __restrict__ dy, float* __restrict__ dtable, int64_t n, int64_t c,
                                    int64_t start, int64_t v_local, int64_t vocab, device::DeferredError* err,
                                    uint64_t what, uint64_t hint) {
  for (int64_t s = blockIdx.x; s < n; s += gridDim.x) {
    const int32_t key = keys[s];
    if (s > 0 && keys[s - 1] == key) continue;  // inside a run: its first index does the work
    if (key < 0 || key >= vocab) {
      // pos[s] is the first row holding this id. vocab == kUncheckedVocab: only negatives are errors.
      if (threadIdx.x == 0) report_bad_value(err, what, hint, pos[s], key, vocab == kUncheckedVocab ? 0 : vocab);
      continue;
    }
    const int64_t local = static_cast<int64_t>(key) - start;
    if (local < 0 || local >= v_local) continue;  // another slot's row
    int64_t end = s + 1;
    while (end < n && keys[end] == key) ++end;
    float* dst = dtable + local * c;  // (C)
    for (int64_t col = threadIdx.x; col < c; col += blockDim.x) {
      float acc = 0.0f;
      for (int64_t t = s; t < end; ++t) acc += to_f32(dy[static_cast<int64_t>(pos[t]) * c + col]);
      dst[col] += acc;
    }
  }
}

// y (B, T, C) += pos rows 0..T-1; packed when C is a whole number of packs (a pack never straddles two rows).
template <class T, bool kVector>
__global__ void add_positions_kernel(T* __restrict__ y, const T* __restrict__ pos, int64_t n, int64_t c, int64_t t) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVector) {
    constexpr int P = kPack<T>;
    auto* py = reinterpret_cast<Pack<T>*>(y);
    const auto* pp = reinterpret_cast<const Pack<T>*>(pos);
    for (int64_t i = tid; i < n / P; i += stride) {
      const int64_t e = i * P, row = e / c, col = e - row * c;
      Pack<T> v = py[i];
      const Pack<T> w = pp[((row % t) * c + col) / P];
#pragma unroll
      for (int k = 0; k < P; ++k) v.v[k] = from_f32<T>(to_f32(v.v[k]) + to_f32(w.v[k]));
      py[i] = v;
    }
  } else {
    for (int64_t e = tid; e < n; e += stride) {
      const int64_t row = e / c, col = e - row * c;
      y[e] = from_f32<T>(to_f32(y[e]) + to_f32(pos[(row % t) * c + col]));
    }
  }
}

// dpos (T_max, C) rows 0..T-1 += sum over b, in order, of dy (B, T, C): one thread per (t, c).
template <class T>
__global__ void positions_backward_kernel(const T* __restrict__ dy, float* __restrict__ dpos, int64_t b, int64_t tc) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < tc; e += stride) {
    float acc = 0.0f;
    for (int64_t bi = 0; bi < b; ++bi) acc += to_f32(dy[bi * tc + e]);
    dpos[e] += acc;
  }
}

template <class U>
void launch_gather(device::CudaDevice& dev, const Tensor& ids, const void* table, void* y, int64_t n, int64_t units,
                   int64_t start, int64_t v_local, int64_t vocab) {
  gather_rows_kernel<U><<<grid_for(dev, n * units), kThreads, 0, dev.compute_stream()>>>(
      ids.i32(), static_cast<const U*>(table), static_cast<U*>(y), n, units, start, v_local, vocab,
      dev.deferred_error_slot(), host_text(kForwardWhat), host_text(kVocabHint));
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& y, int64_t start, int64_t vocab) {
  const char* op = "embedding_forward";
  check_dtype(op, "ids", ids, DType::I32);
  check_float(op, "table", table);
  check_dtype(op, "y", y, table.dtype());
  const int64_t n = ids.numel(), v_local = table.dim(0), c = table.dim(1);
  if (n == 0 || c == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  const size_t row_bytes = static_cast<size_t>(c) * dtype_size(table.dtype());
  if (row_bytes % 16 == 0 && aligned16(table.raw()) && aligned16(y.raw())) {
    launch_gather<Pack<float>>(dev, ids, table.raw(), y.raw(), n, static_cast<int64_t>(row_bytes / 16), start, v_local,
                               vocab);
  } else if (table.dtype() == DType::F32) {
    launch_gather<float>(dev, ids, table.raw(), y.raw(), n, c, start, v_local, vocab);
  } else {
    launch_gather<uint16_t>(dev, ids, table.raw(), y.raw(), n, c, start, v_local, vocab);
  }
}

void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dtable, int64_t start, int64_t vocab) {
  const char* op = "embedding_backward";
  check_dtype(op, "ids", ids, DType::I32);
  check_float(op, "dy", dy);
  check_dtype(op, "dtable", dtable, DType::F32);
  const int64_t n = ids.numel(), v_local = dtable.dim(0), c = dtable.dim(1);
  if (n == 0 || c == 0) return;
  TANDEM_CHECK(n <= INT_MAX, op, ": ", n, " ids exceed the 32-bit sort");
  device::CudaDevice& dev = cuda_device(dtable);
  const cudaStream_t stream = dev.compute_stream();

  Tensor sorted = Tensor::empty({3, n}, DType::I32, dev, "embedding_backward sort");  // keys, positions in, out
  int32_t* keys_out = sorted.i32();
  int32_t* pos_in = keys_out + n;
  int32_t* pos_out = pos_in + n;
  iota_kernel<<<grid_for(dev, n), kThreads, 0, stream>>>(pos_in, n);
  TANDEM_CUDA_CHECK_LAUNCH();
  size_t temp_bytes = 0;
  TANDEM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ids.i32(), keys_out, pos_in, pos_out,
                                                    static_cast<int>(n), 0, 32, stream));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes / 4 + 1)}, DType::I32, dev, "embedding_backward sort");
  TANDEM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw(), temp_bytes, ids.i32(), keys_out, pos_in, pos_out,
                                                    static_cast<int>(n), 0, 32, stream));

  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n, int64_t{1} << 20));
  dispatch_float(dy.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    scatter_runs_kernel<T><<<blocks, kThreads, 0, stream>>>(keys_out, pos_out, dy.data<T>(), dtable.f32(), n, c, start,
                                                            v_local, vocab, dev.deferred_error_slot(),
                                                            host_text(kBackwardWhat), host_text(kVocabHint));
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void add_positions(const Tensor& y, const Tensor& pos) {
  check_float("add_positions", "y", y);
  check_dtype("add_positions", "pos", pos, y.dtype());
  const int64_t n = y.numel(), t = y.dim(1), c = y.dim(2);
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  dispatch_float(y.dtype(), "add_positions", [&](auto tag) {
    using T = decltype(tag);
    if (c % kPack<T> == 0 && aligned16(y.raw()) && aligned16(pos.raw())) {
      add_positions_kernel<T, true>
          <<<grid_for(dev, n / kPack<T>), kThreads, 0, dev.compute_stream()>>>(y.data<T>(), pos.data<T>(), n, c, t);
    } else {
      add_positions_kernel<T, false>
          <<<grid_for(dev, n), kThreads, 0, dev.compute_stream()>>>(y.data<T>(), pos.data<T>(), n, c, t);
    }
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void add_positions_backward(const Tensor& dy, const Tensor& dpos) {
  check_float("add_positions_backward", "dy", dy);
  check_dtype("add_positions_backward", "dpos", dpos, DType::F32);
  const int64_t b = dy.dim(0), tc = dy.dim(1) * dy.dim(2);
  if (tc == 0) return;
  device::CudaDevice& dev = cuda_device(dpos);
  dispatch_float(dy.dtype(), "add_positions_backward", [&](auto tag) {
    using T = decltype(tag);
    positions_backward_kernel<T>
        <<<grid_for(dev, tc), kThreads, 0, dev.compute_stream()>>>(dy.data<T>(), dpos.f32(), b, tc);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
