// CUDA softmax cross-entropy: per-row loss and log-sum-exp (forward), the logits gradient (backward), the per-slot
// statistics of the vocabulary-sharded form and the joining step (finish). Rows whose target is kIgnoreTarget count
// nothing: no loss, no gradient. One block per row of V logits for the
// reductions (fp32 exps and sums, fixed-order block reductions); the backward is a flat elementwise pass.
// Bad targets are reported through the device's deferred-error slot (see cuda_ops.h).
#include <cmath>

#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr const char* kTargetHint = "; check that the tokenizer matches the model's vocab_size";
constexpr const char* kForwardWhat = "cross_entropy_forward: target id";
constexpr const char* kStatsWhat = "cross_entropy_stats: target id";
constexpr const char* kBackwardWhat = "cross_entropy_backward: target id";

// Blocks for the one-row-per-block kernels: one per row up to a fully occupied GPU, then the rows stride.
unsigned row_grid(const device::CudaDevice& dev, int64_t rows) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(rows, int64_t{dev.sm_count()} * 8)));
}

// Calls f(j, value) for this thread's share of a row of v logits, with 16-byte loads when `packed`.
template <class T, class F>
__device__ __forceinline__ void for_row(const T* row, int64_t v, bool packed, F&& f) {
  if (packed) {
    constexpr int P = kPack<T>;
    const auto* p = reinterpret_cast<const Pack<T>*>(row);
    for (int64_t i = threadIdx.x; i < v / P; i += blockDim.x) {
      const Pack<T> x = p[i];
#pragma unroll
      for (int k = 0; k < P; ++k) f(i * P + k, to_f32(x.v[k]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) f(j, to_f32(row[j]));
  }
}

template <class T>
__device__ __forceinline__ float block_row_max(const T* row, int64_t v, bool packed, float* scratch) {
  float mx = -INFINITY;
  for_row(row, v, packed, [&](int64_t, float a) { mx = fmaxf(mx, a); });
  return block_reduce(mx, MaxOp{}, -INFINITY, scratch);
}

template <class T>
__device__ __forceinline__ float block_row_sum_exp(const T* row, int64_t v, bool packed, float shift, float* scratch) {
  float s = 0.0f;
  for_row(row, v, packed, [&](int64_t, float a) { s += expf(a - shift); });
  return block_reduce(s, SumOp{}, 0.0f, scratch);
}

// logits (N, V) in T; targets (N); losses, lse (N) f32.
template <class T>
__global__ void forward_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                               float* __restrict__ losses, float* __restrict__ lse, int64_t n, int64_t v, bool packed,
                               device::DeferredError* err, uint64_t what, uint64_t hint) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const T* x = logits + row * v;  // (V)
    const float mx = block_row_max(x, v, packed, scratch);
    const float sum = block_row_sum_exp(x, v, packed, mx, scratch);
    if (threadIdx.x == 0) {
      const float l = mx + logf(sum);
      lse[row] = l;
      const int64_t target = targets[row];
      if (target == kIgnoreTarget) {
        losses[row] = 0.0f;  // a row that does not count
      } else if (target < 0 || target >= v) {
        report_bad_value(err, what, hint, row, target, v);
        losses[row] = NAN;
      } else {
        losses[row] = l - to_f32(x[target]);
      }
    }
  }
}

// logits (N, V_local) in T; row_max, target_logit (N) f32.
template <class T>
__global__ void stats_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                             float* __restrict__ row_max_out, float* __restrict__ target_logit, int64_t n,
                             int64_t v_local, int64_t start, int64_t vocab, bool packed, device::DeferredError* err,
                             uint64_t what, uint64_t hint) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const T* x = logits + row * v_local;  // (V_local)
    const float mx = block_row_max(x, v_local, packed, scratch);
    if (threadIdx.x == 0) {
      row_max_out[row] = mx;
      const int64_t target = targets[row];
      const bool ignored = target == kIgnoreTarget;
      if (!ignored && (target < 0 || target >= vocab)) report_bad_value(err, what, hint, row, target, vocab);
      const int64_t local = ignored ? -1 : target - start;
      // Zero from the slots that do not hold the target, so a sum over slots yields the target's logit.
      target_logit[row] = local >= 0 && local < v_local ? to_f32(x[local]) : 0.0f;
    }
  }
}

template <class T>
__global__ void sum_exp_kernel(const T* __restrict__ logits, const float* __restrict__ row_max_in,
                               float* __restrict__ sum_exp, int64_t n, int64_t v, bool packed) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const float s = block_row_sum_exp(logits + row * v, v, packed, row_max_in[row], scratch);
    if (threadIdx.x == 0) sum_exp[row] = s;
  }
}

// dlogits (N, V_local) = scale (exp(logits - lse) - onehot(target - start)). dlogits may be logits: each element is
// read, then written, by one thread (hence no __restrict__ on them).
template <class T, bool kVector>
__global__ void backward_kernel(const T* logits, const int32_t* __restrict__ targets, const float* __restrict__ lse,
                                float scale, T* dlogits, int64_t n, int64_t v, int64_t start, int64_t vocab,
                                device::DeferredError* err, uint64_t what, uint64_t hint) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // The target's column in this slot, or -1; a bad target is reported by the thread holding the row's column 0.
  auto target_col = [&](int64_t row, int64_t col0) -> int64_t {
    const int64_t target = targets[row];
    if (target == kIgnoreTarget) return -1;
    if (target < 0 || target >= vocab) {
      if (col0 == 0) report_bad_value(err, what, hint, row, target, vocab == kUncheckedVocab ? 0 : vocab);
      return -1;
    }
    return target - start;
  };
  if constexpr (kVector) {
    constexpr int P = kPack<T>;
    const auto* px = reinterpret_cast<const Pack<T>*>(logits);
    auto* pg = reinterpret_cast<Pack<T>*>(dlogits);
    for (int64_t i = tid; i < n * v / P; i += stride) {
      const int64_t e = i * P, row = e / v, col0 = e - row * v;
      const int64_t hit = target_col(row, col0);
      const float l = lse[row];
      const float row_scale = targets[row] == kIgnoreTarget ? 0.0f : scale;  // a row that does not count: 0
      const Pack<T> x = px[i];
      Pack<T> g;
#pragma unroll
      for (int k = 0; k < P; ++k) {
        float d = row_scale * expf(to_f32(x.v[k]) - l);
        if (col0 + k == hit) d -= row_scale;
        g.v[k] = from_f32<T>(d);
      }
      pg[i] = g;
    }
  } else {
    for (int64_t e = tid; e < n * v; e += stride) {
      const int64_t row = e / v, col = e - row * v;
      const int64_t hit = target_col(row, col);
      const float row_scale = targets[row] == kIgnoreTarget ? 0.0f : scale;
      float d = row_scale * expf(to_f32(logits[e]) - lse[row]);
      if (col == hit) d -= row_scale;
      dlogits[e] = from_f32<T>(d);
    }
  }
}

// lse (N): sum_exp in, row_max + log(sum_exp) out; loss_sum (1) += sum of (lse - target_logit). One block, fixed
// order, the loss sum in double.
__global__ void finish_kernel(const float* __restrict__ row_max_in, const float* __restrict__ target_logit,
                              float* __restrict__ lse, const int32_t* __restrict__ targets,
                              float* __restrict__ loss_sum, int64_t n) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float l = row_max_in[i] + logf(lse[i]);
    lse[i] = l;
    if (targets[i] != kIgnoreTarget) acc += static_cast<double>(l) - static_cast<double>(target_logit[i]);
  }
  acc = block_reduce(acc, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) loss_sum[0] = static_cast<float>(static_cast<double>(loss_sum[0]) + acc);
}

template <class T>
bool packable(const Tensor& logits) {
  return cols_of(logits) % kPack<T> == 0 && aligned16(logits.raw());
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse) {
  const char* op = "cross_entropy_forward";
  check_float(op, "logits", logits);
  check_dtype(op, "targets", targets, DType::I32);
  check_dtype(op, "losses", losses, DType::F32);
  check_dtype(op, "lse", lse, DType::F32);
  const int64_t n = rows_of(logits), v = cols_of(logits);
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(losses);
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T><<<row_grid(dev, n), kThreads, 0, dev.compute_stream()>>>(
        logits.data<T>(), targets.i32(), losses.f32(), lse.f32(), n, v, packable<T>(logits), dev.deferred_error_slot(),
        host_text(kForwardWhat), host_text(kTargetHint));
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_stats(const Tensor& logits, const Tensor& targets, int64_t start, int64_t vocab,
                         const Tensor& row_max, const Tensor& target_logit) {
  const char* op = "cross_entropy_stats";
  check_float(op, "logits", logits);
  check_dtype(op, "targets", targets, DType::I32);
  check_dtype(op, "row_max", row_max, DType::F32);
  check_dtype(op, "target_logit", target_logit, DType::F32);
  const int64_t n = rows_of(logits), v_local = cols_of(logits);
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(row_max);
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    stats_kernel<T><<<row_grid(dev, n), kThreads, 0, dev.compute_stream()>>>(
        logits.data<T>(), targets.i32(), row_max.f32(), target_logit.f32(), n, v_local, start, vocab,
        packable<T>(logits), dev.deferred_error_slot(), host_text(kStatsWhat), host_text(kTargetHint));
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void row_sum_exp(const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp) {
  const char* op = "row_sum_exp";
  check_float(op, "logits", logits);
  check_dtype(op, "row_max", row_max, DType::F32);
  check_dtype(op, "sum_exp", sum_exp, DType::F32);
  const int64_t n = rows_of(logits), v = cols_of(logits);
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(sum_exp);
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    sum_exp_kernel<T><<<row_grid(dev, n), kThreads, 0, dev.compute_stream()>>>(
        logits.data<T>(), row_max.f32(), sum_exp.f32(), n, v, packable<T>(logits));
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale,
                            const Tensor& dlogits, int64_t start, int64_t vocab) {
  const char* op = "cross_entropy_backward";
  check_float(op, "logits", logits);
  check_dtype(op, "dlogits", dlogits, logits.dtype());
  check_dtype(op, "targets", targets, DType::I32);
  check_dtype(op, "lse", lse, DType::F32);
  const int64_t n = rows_of(logits), v = cols_of(logits);
  if (n == 0 || v == 0) return;
  device::CudaDevice& dev = cuda_device(dlogits);
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const uint64_t what = host_text(kBackwardWhat), hint = host_text(kTargetHint);
    if (packable<T>(logits) && aligned16(dlogits.raw())) {
      backward_kernel<T, true><<<grid_for(dev, n * v / kPack<T>), kThreads, 0, dev.compute_stream()>>>(
          logits.data<T>(), targets.i32(), lse.f32(), scale, dlogits.data<T>(), n, v, start, vocab,
          dev.deferred_error_slot(), what, hint);
    } else {
      backward_kernel<T, false><<<grid_for(dev, n * v), kThreads, 0, dev.compute_stream()>>>(
          logits.data<T>(), targets.i32(), lse.f32(), scale, dlogits.data<T>(), n, v, start, vocab,
          dev.deferred_error_slot(), what, hint);
    }
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_finish(const Tensor& row_max, const Tensor& target_logit, const Tensor& lse, const Tensor& targets,
                          const Tensor& loss_sum) {
  const char* op = "cross_entropy_finish";
  for (const Tensor* t : {&row_max, &target_logit, &lse, &loss_sum}) check_dtype(op, "every tensor", *t, DType::F32);
  check_dtype(op, "targets", targets, DType::I32);
  TANDEM_CHECK(row_max.numel() == lse.numel() && target_logit.numel() == lse.numel() && loss_sum.numel() == 1, op,
               ": row_max ", shape_str(row_max.shape()), ", target_logit ", shape_str(target_logit.shape()), ", lse ",
               shape_str(lse.shape()), " and loss_sum ", shape_str(loss_sum.shape()), " do not fit");
  const int64_t n = lse.numel();
  device::CudaDevice& dev = cuda_device(lse);
  // One block of 1024 threads: the rows of a step (tens of thousands) are few for a GPU, and one block keeps the
  // summation order fixed without a second pass.
  finish_kernel<<<1, 1024, 0, dev.compute_stream()>>>(row_max.f32(), target_logit.f32(), lse.f32(), targets.i32(),
                                                      loss_sum.f32(), n);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::ops::cuda
