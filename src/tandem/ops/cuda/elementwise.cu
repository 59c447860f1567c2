// CUDA elementwise ops: bias add and its column reduction, add, axpy, scale, ReLU, GELU, GELU of a biased input,
// casts and fill.
// One grid-stride map kernel serves the pointwise ops, with 16-byte packs when every pointer allows it. No
// __restrict__ on the map pointers: out may be one of the inputs (in-place add, axpy, scale), and each element is
// read before it is written by the same thread, so that is safe.
#include "tandem/ops/cuda/column_sum.cuh"
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/cuda_util.h"
#include "tandem/ops/cuda/kernel_util.cuh"
#include "tandem/ops/op_util.h"

namespace tandem::ops::cuda {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct AxpyOp {  // a = x, b = y: y + alpha x
  float alpha;
  __device__ float operator()(float x, float y) const { return y + alpha * x; }
};
struct ScaleOp {
  float alpha;
  __device__ float operator()(float x, float) const { return x * alpha; }
};
struct ReluOp {
  __device__ float operator()(float x, float) const { return x > 0.0f ? x : 0.0f; }
};
struct ReluBackwardOp {  // a = x, b = dy
  __device__ float operator()(float x, float dy) const { return x > 0.0f ? dy : 0.0f; }
};
struct SigmoidOp {
  __device__ float operator()(float x, float) const { return 1.0f / (1.0f + expf(-x)); }
};
struct SigmoidBackwardOp {  // a = y (the forward's output), b = dy
  __device__ float operator()(float y, float dy) const { return dy * y * (1.0f - y); }
};
struct GeluOp {
  __device__ float operator()(float x, float) const {
    return 0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluA * x * x * x)));
  }
};
struct GeluBackwardOp {  // a = x, b = dy
  __device__ float operator()(float x, float dy) const {
    const float t = tanhf(kGeluK * (x + kGeluA * x * x * x));
    // d/dx of 0.5 x (1 + t), with dt/dx = (1 - t^2) K (1 + 3 A x^2).
    const float local = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
    return dy * local;
  }
};

// out[i] = op(a[i], b[i]) over n elements (b may be null: the op then gets 0 as its second argument).
template <class T, class Op, bool kVector>
__global__ void map_kernel(const T* a, const T* b, T* out, int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t head = 0;  // elements done by the packed loop
  if constexpr (kVector) {
    constexpr int P = kPack<T>;
    const int64_t packs = n / P;
    const auto* pa = reinterpret_cast<const Pack<T>*>(a);
    const auto* pb = reinterpret_cast<const Pack<T>*>(b);
    auto* po = reinterpret_cast<Pack<T>*>(out);
    for (int64_t i = tid; i < packs; i += stride) {
      const Pack<T> x = pa[i];
      Pack<T> y;
      if (pb) y = pb[i];
      Pack<T> z;
#pragma unroll
      for (int k = 0; k < P; ++k) z.v[k] = from_f32<T>(op(to_f32(x.v[k]), pb ? to_f32(y.v[k]) : 0.0f));
      po[i] = z;
    }
    head = packs * P;
  }
  for (int64_t i = head + tid; i < n; i += stride) out[i] = from_f32<T>(op(to_f32(a[i]), b ? to_f32(b[i]) : 0.0f));
}

template <class T, class Op>
void launch_map(const Tensor& like, const T* a, const T* b, T* out, int64_t n, Op op) {
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(like);
  const bool vector = aligned16(a) && (b == nullptr || aligned16(b)) && aligned16(out);
  if (vector) {
    const int64_t items = std::max<int64_t>(n / kPack<T>, n % kPack<T>);
    map_kernel<T, Op, true><<<grid_for(dev, items), kThreads, 0, dev.compute_stream()>>>(a, b, out, n, op);
  } else {
    map_kernel<T, Op, false><<<grid_for(dev, n), kThreads, 0, dev.compute_stream()>>>(a, b, out, n, op);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

// Unary: out = op(x). Binary: out = op(a, b). All tensors share one float dtype.
template <class Op>
void unary(const char* name, const Tensor& x, const Tensor& out, Op op) {
  check_float(name, "x", x);
  check_dtype(name, "out", out, x.dtype());
  dispatch_float(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    launch_map<T>(out, x.data<T>(), static_cast<const T*>(nullptr), out.data<T>(), out.numel(), op);
  });
}

template <class Op>
void binary(const char* name, const Tensor& a, const Tensor& b, const Tensor& out, Op op) {
  check_float(name, "a", a);
  check_dtype(name, "b", b, a.dtype());
  check_dtype(name, "out", out, a.dtype());
  dispatch_float(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    launch_map<T>(out, a.data<T>(), b.data<T>(), out.data<T>(), out.numel(), op);
  });
}

// y (N, C) += bias (C). Packed when C is a whole number of packs, so a pack never straddles two rows.
template <class T, bool kVector>
__global__ void add_bias_kernel(T* __restrict__ y, const T* __restrict__ bias, int64_t n, int64_t c) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVector) {
    constexpr int P = kPack<T>;
    auto* py = reinterpret_cast<Pack<T>*>(y);
    const auto* pb = reinterpret_cast<const Pack<T>*>(bias);
    const int64_t packs = n / P, row_packs = c / P;
    for (int64_t i = tid; i < packs; i += stride) {
      Pack<T> v = py[i];
      const Pack<T> w = pb[i % row_packs];
#pragma unroll
      for (int k = 0; k < P; ++k) v.v[k] = from_f32<T>(to_f32(v.v[k]) + to_f32(w.v[k]));
      py[i] = v;
    }
  } else {
    for (int64_t i = tid; i < n; i += stride) y[i] = from_f32<T>(to_f32(y[i]) + to_f32(bias[i % c]));
  }
}

// out (N, C) = op(x + bias, g): the sum rounded to T first (as add_bias stores it), then op in fp32 with g's
// element (g null: 0). Packed when C is a whole number of packs, so a pack never straddles two rows. out may be x or
// g (each element is read before the same thread writes it).
template <class T, class Op, bool kVector>
__global__ void bias_map_kernel(const T* x, const T* bias, const T* g, T* out, int64_t n, int64_t c, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVector) {
    constexpr int P = kPack<T>;
    const auto* px = reinterpret_cast<const Pack<T>*>(x);
    const auto* pb = reinterpret_cast<const Pack<T>*>(bias);
    const auto* pg = reinterpret_cast<const Pack<T>*>(g);
    auto* po = reinterpret_cast<Pack<T>*>(out);
    const int64_t packs = n / P, row_packs = c / P;
    for (int64_t i = tid; i < packs; i += stride) {
      const Pack<T> v = px[i];
      const Pack<T> w = pb[i % row_packs];
      Pack<T> d;
      if (pg) d = pg[i];
      Pack<T> z;
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const float pre = to_f32(from_f32<T>(to_f32(v.v[k]) + to_f32(w.v[k])));
        z.v[k] = from_f32<T>(op(pre, pg ? to_f32(d.v[k]) : 0.0f));
      }
      po[i] = z;
    }
  } else {
    for (int64_t i = tid; i < n; i += stride) {
      const float pre = to_f32(from_f32<T>(to_f32(x[i]) + to_f32(bias[i % c])));
      out[i] = from_f32<T>(op(pre, g ? to_f32(g[i]) : 0.0f));
    }
  }
}

template <class Op>
void bias_map(const char* name, const Tensor& x, const Tensor& bias, const Tensor* g, const Tensor& out, Op op) {
  check_float(name, "x", x);
  check_dtype(name, "bias", bias, x.dtype());
  check_dtype(name, "out", out, x.dtype());
  if (g) check_dtype(name, "dy", *g, x.dtype());
  const int64_t n = x.numel(), c = cols_of(x);
  if (n == 0 || c == 0) return;
  device::CudaDevice& dev = cuda_device(out);
  dispatch_float(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pb = bias.data<T>();
    const T* pg = g ? g->data<T>() : nullptr;
    T* po = out.data<T>();
    const bool vector =
        c % kPack<T> == 0 && aligned16(px) && aligned16(pb) && (pg == nullptr || aligned16(pg)) && aligned16(po);
    if (vector) {
      bias_map_kernel<T, Op, true>
          <<<grid_for(dev, n / kPack<T>), kThreads, 0, dev.compute_stream()>>>(px, pb, pg, po, n, c, op);
    } else {
      bias_map_kernel<T, Op, false><<<grid_for(dev, n), kThreads, 0, dev.compute_stream()>>>(px, pb, pg, po, n, c, op);
    }
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

template <class TIn, class TOut>
__global__ void cast_kernel(const TIn* __restrict__ in, TOut* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_f32<TOut>(to_f32(in[i]));
}

template <class T>
__global__ void fill_kernel(T* __restrict__ out, int64_t n, float value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const T v = from_f32<T>(value);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = v;
}

}  // namespace

void add_bias(const Tensor& y, const Tensor& bias) {
  check_float("add_bias", "y", y);
  check_dtype("add_bias", "bias", bias, y.dtype());
  const int64_t n = y.numel(), c = cols_of(y);
  if (n == 0 || c == 0) return;
  device::CudaDevice& dev = cuda_device(y);
  dispatch_float(y.dtype(), "add_bias", [&](auto tag) {
    using T = decltype(tag);
    T* out = y.data<T>();
    const T* b = bias.data<T>();
    if (c % kPack<T> == 0 && aligned16(out) && aligned16(b)) {
      add_bias_kernel<T, true><<<grid_for(dev, n / kPack<T>), kThreads, 0, dev.compute_stream()>>>(out, b, n, c);
    } else {
      add_bias_kernel<T, false><<<grid_for(dev, n), kThreads, 0, dev.compute_stream()>>>(out, b, n, c);
    }
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

void bias_backward(const Tensor& dy, const Tensor& dbias) {
  check_float("bias_backward", "dy", dy);
  check_dtype("bias_backward", "dbias", dbias, DType::F32);
  const int64_t n = rows_of(dy), c = cols_of(dy);
  dispatch_float(dy.dtype(), "bias_backward", [&](auto tag) {
    using T = decltype(tag);
    column_sums_of<T>(dy, dy.data<T>(), n, c, dbias.f32());
  });
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) { binary("add", a, b, out, AddOp{}); }

void axpy(float alpha, const Tensor& x, const Tensor& y) { binary("axpy", x, y, y, AxpyOp{alpha}); }

void scale(const Tensor& x, float alpha) { unary("scale", x, x, ScaleOp{alpha}); }

void relu_forward(const Tensor& x, const Tensor& y) { unary("relu_forward", x, y, ReluOp{}); }

void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  binary("relu_backward", x, dy, dx, ReluBackwardOp{});
}

void sigmoid_forward(const Tensor& x, const Tensor& y) { unary("sigmoid_forward", x, y, SigmoidOp{}); }

void sigmoid_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  binary("sigmoid_backward", y, dy, dx, SigmoidBackwardOp{});
}

void gelu_forward(const Tensor& x, const Tensor& y) { unary("gelu_forward", x, y, GeluOp{}); }

void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  binary("gelu_backward", x, dy, dx, GeluBackwardOp{});
}

void bias_gelu_forward(const Tensor& x, const Tensor& bias, const Tensor& y) {
  bias_map("bias_gelu_forward", x, bias, nullptr, y, GeluOp{});
}

void bias_gelu_backward(const Tensor& x, const Tensor& bias, const Tensor& dy, const Tensor& dx) {
  bias_map("bias_gelu_backward", x, bias, &dy, dx, GeluBackwardOp{});
}

void cast(const Tensor& src, const Tensor& dst) {
  check_float("cast", "src", src);
  check_float("cast", "dst", dst);
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype() == dst.dtype()) {
    if (src.raw() != dst.raw()) cuda_device(dst).copy(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  device::CudaDevice& dev = cuda_device(dst);
  dispatch_float(src.dtype(), "cast", [&](auto in_tag) {
    using TIn = decltype(in_tag);
    dispatch_float(dst.dtype(), "cast", [&](auto out_tag) {
      using TOut = decltype(out_tag);
      cast_kernel<TIn, TOut>
          <<<grid_for(dev, n), kThreads, 0, dev.compute_stream()>>>(src.data<TIn>(), dst.data<TOut>(), n);
      TANDEM_CUDA_CHECK_LAUNCH();
    });
  });
}

void fill(const Tensor& x, float value) {
  check_float("fill", "x", x);
  const int64_t n = x.numel();
  if (n == 0) return;
  device::CudaDevice& dev = cuda_device(x);
  dispatch_float(x.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<grid_for(dev, n), kThreads, 0, dev.compute_stream()>>>(x.data<T>(), n, value);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::ops::cuda
