// ops_check: every CUDA op against the CPU op on the same inputs, for each dtype, then timings of the main ops.
// Inputs are Philox normals rounded to the dtype under test, so both sides see identical values; the CPU runs in f32.
// CUDA outputs are poisoned first (bytes 0xFF: NaN in f32, bf16 and f16), so an element the op forgot to write
// fails the check. The error is ||gpu - cpu|| / ||cpu|| over all elements, against the bound of tolerances.h
// for the dtype (f32, bf16, f16), for sum_squares, or exact. ctest runs it as the test cuda_ops_check (label gpu).
// Usage: ops_check [--no-bench] [--filter=<substring of the op name>]. Exit status 1 when any row fails.
//        ops_check --print-tolerances: the table of tolerances.h, one "name bound" a line (needs no GPU).
#include <cuda_runtime_api.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/philox.h"
#include "tandem/core/tensor.h"
#include "tandem/core/units.h"
#include "tandem/device/cpu_device.h"
#include "tandem/device/cuda/cuda_check.h"
#include "tandem/device/cuda/cuda_device.h"
#include "tandem/ops/cpu/cpu_ops.h"
#include "tandem/ops/cuda/attention_gqa_plain.h"
#include "tandem/ops/cuda/cuda_ops.h"
#include "tandem/ops/cuda/gemm_stats.h"
#include "tandem/ops/cuda/scratch_sizes.h"
#include "tandem/ops/rope_tables.h"
#include "tolerances.h"

namespace tandem {
namespace {

namespace cpu = ops::cpu;
namespace gpu = ops::cuda;
using device::CpuDevice;
using device::CudaDevice;

const std::vector<DType> kFloatTypes = {DType::F32, DType::BF16, DType::F16};

double bound_for(DType t) {
  switch (t) {
    case DType::F32:
      return gpu_check::kOpF32;
    case DType::BF16:
      return gpu_check::kOpBf16;
    default:
      return gpu_check::kOpF16;
  }
}

// ---- host values ----

std::vector<char> encode(const std::vector<float>& v, DType t) {
  std::vector<char> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = t == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// The values as the dtype stores them.
std::vector<float> rounded(std::vector<float> v, DType t) {
  if (t == DType::F32) return v;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i)
    v[i] = t == DType::BF16 ? bf16_to_f32(f32_to_bf16(v[i])) : f16_to_f32(f32_to_f16(v[i]));
  return v;
}

std::vector<float> normals(int64_t n, uint64_t seed, float stddev = 1.0f, float mean = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) v[i] = mean + stddev * normal_at(seed, 0x0c4ec, static_cast<uint64_t>(i));
  return v;
}

std::vector<int32_t> random_ids(int64_t n, uint64_t seed, int64_t lo, int64_t hi) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<int32_t>(lo + static_cast<int64_t>(bits64_at(seed, 0x1d5, i) % static_cast<uint64_t>(hi - lo)));
  return v;
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(num) / std::sqrt(den);
}

// Bitwise equality of two tensors of one shape and dtype.
bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_host_floats(), y = b.to_host_floats();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// ---- the harness ----

class Suite {
 public:
  Suite(CpuDevice& host, CudaDevice& dev, std::string filter) : host_(host), dev_(dev), filter_(std::move(filter)) {}

  CpuDevice& host() { return host_; }
  CudaDevice& dev() { return dev_; }
  int failures() const { return failures_; }

  bool wanted(const std::string& op) const { return filter_.empty() || op.find(filter_) != std::string::npos; }

  // Runs one check; an exception is a failed row.
  void run(const std::string& op, const std::string& dtype, const std::string& shape, const std::function<void()>& f) {
    if (!wanted(op)) return;
    try {
      f();
    } catch (const std::exception& e) {
      row(op, dtype, shape, NAN, 0.0, std::string("threw: ") + e.what());
    }
  }

  void row(const std::string& op, const std::string& dtype, const std::string& shape, double err, double bound,
           const std::string& note = "") {
    const bool pass = err <= bound;  // false for NaN
    if (!pass) ++failures_;
    std::printf("%-34s %-10s %-26s %11.3e %9.1e  %s%s%s\n", op.c_str(), dtype.c_str(), shape.c_str(), err, bound,
                pass ? "PASS" : "FAIL", note.empty() ? "" : "  ", note.c_str());
    std::fflush(stdout);
  }

  // Compares a CUDA tensor with its CPU (f32) counterpart and prints the row.
  void compare(const std::string& op, DType t, const std::string& shape, const Tensor& got, const Tensor& want) {
    const std::vector<float> g = got.to_host_floats();
    const std::vector<float> w = want.to_host_floats();
    row(op, dtype_name(t), shape, rel_error(g, w), bound_for(t));
  }
  void compare(const std::string& op, DType t, const std::string& shape, const Tensor& got,
               const std::vector<float>& want) {
    row(op, dtype_name(t), shape, rel_error(got.to_host_floats(), want), bound_for(t));
  }

  // A CPU f32 tensor and a CUDA tensor of dtype t holding the same values.
  struct Pair {
    Tensor cpu, gpu;
  };
  Pair make(const Shape& shape, DType t, uint64_t seed, float stddev = 1.0f, float mean = 0.0f) {
    const std::vector<float> v = rounded(normals(shape_numel(shape), seed, stddev, mean), t);
    return from_values(shape, t, v);
  }
  Pair from_values(const Shape& shape, DType t, const std::vector<float>& v) {
    Pair p{Tensor::empty(shape, DType::F32, host_, "cpu input"), Tensor::empty(shape, t, dev_, "gpu input")};
    std::memcpy(p.cpu.f32(), v.data(), v.size() * sizeof(float));
    const std::vector<char> bytes = encode(v, t);
    p.gpu.copy_from_host(bytes.data());
    return p;
  }
  // Outputs: the CPU side uninitialised, the CUDA side full of NaN.
  Pair output(const Shape& shape, DType t) {
    Pair p{Tensor::empty(shape, DType::F32, host_, "cpu output"), Tensor::empty(shape, t, dev_, "gpu output")};
    poison(p.gpu);
    return p;
  }
  Pair ids(const std::vector<int32_t>& v) {
    const Shape shape{static_cast<int64_t>(v.size())};
    Pair p{Tensor::empty(shape, DType::I32, host_, "cpu ids"), Tensor::empty(shape, DType::I32, dev_, "gpu ids")};
    std::memcpy(p.cpu.i32(), v.data(), v.size() * sizeof(int32_t));
    p.gpu.copy_from_host(v.data());
    return p;
  }
  // A CUDA copy of a CPU f32 tensor, rounded to dtype t (e.g. a CPU forward's output fed to a CUDA backward).
  Tensor upload(const Tensor& cpu_tensor, DType t) {
    const std::vector<float> v = rounded(cpu_tensor.to_host_floats(), t);
    Tensor g = Tensor::empty(cpu_tensor.shape(), t, dev_, "gpu copy");
    g.copy_from_host(encode(v, t).data());
    return g;
  }
  void poison(const Tensor& t) { TANDEM_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0xFF, t.nbytes(), dev_.compute_stream())); }

 private:
  CpuDevice& host_;
  CudaDevice& dev_;
  std::string filter_;
  int failures_ = 0;
};

std::string dims(std::initializer_list<int64_t> d) { return shape_str(Shape(d)); }

// ---- checks, one function per op family ----

void check_matmul(Suite& s) {
  struct Case {
    int64_t m, k, n;
    bool ta, tb;
    bool c_f32;
    float beta;
  };
  const std::vector<Case> cases = {
      {37, 53, 29, false, false, false, 0.0f},
      {37, 53, 29, true, false, false, 0.0f},
      {37, 53, 29, false, true, false, 0.0f},
      {37, 53, 29, true, true, false, 0.0f},
      {5, 0, 7, false, false, false, 0.0f},
      {5, 0, 7, false, false, false, 0.5f},    // empty sums: c = beta c
      {70, 300, 90, true, false, true, 1.0f},  // a weight gradient: x^T dy accumulated into an f32 buffer
      {64, 128, 96, false, true, false, 0.5f},
      {4096, 1600, 6400, false, true, false, 0.0f},  // GPT-2 XL fc: x (4096, 1600) @ W^T, W (6400, 1600)
      {4096, 6400, 1600, false, false, false, 0.0f},
      {1600, 4096, 6400, true, false, true, 1.0f},  // dW = x^T dy into fp32
  };
  for (DType t : kFloatTypes) {
    for (const Case& c : cases) {
      const std::string shape = dims({c.m, c.k, c.n}) + (c.ta ? " aT" : "") + (c.tb ? " bT" : "") +
                                (c.c_f32 ? " c32" : "") +
                                (c.beta != 0.0f ? " b=" + std::to_string(c.beta).substr(0, 3) : "");
      s.run("matmul", dtype_name(t), shape, [&] {
        const DType ct = c.c_f32 ? DType::F32 : t;
        auto a = s.make(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, t, 1);
        auto b = s.make(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, t, 2);
        auto out = c.beta != 0.0f ? s.make({c.m, c.n}, ct, 3) : s.output({c.m, c.n}, ct);
        cpu::matmul(a.cpu, b.cpu, out.cpu, c.ta, c.tb, c.beta);
        gpu::matmul(a.gpu, b.gpu, out.gpu, c.ta, c.tb, c.beta);
        s.compare("matmul", t, shape, out.gpu, out.cpu);
      });
    }
  }
}

// The linear layer's ops: the product with the bias (and residual) in cuBLASLt's epilogue, and the weight gradient
// with the bias gradient from the same product. Odd small shapes in every combination of the optional terms, then
// the 1.64B's layers at its micro-batch of 8 (8192 rows): qkv (1600 -> 4800), proj (1600 -> 1600, with the
// residual), fc (1600 -> 6400, its bias left to the GELU), out (6400 -> 1600, with the residual).
void check_linear(Suite& s) {
  struct Case {
    int64_t n, in, out;
    bool bias, residual;
  };
  const std::vector<Case> cases = {
      {37, 53, 29, false, false},     {37, 53, 29, true, false},        {37, 53, 29, false, true},
      {37, 53, 29, true, true},       {64, 128, 96, true, true},        {8192, 1600, 4800, true, false},
      {8192, 1600, 1600, true, true}, {8192, 1600, 6400, false, false}, {8192, 6400, 1600, true, true}};
  for (DType t : kFloatTypes) {
    for (const Case& c : cases) {
      const std::string shape = dims({c.n, c.in, c.out}) + (c.bias ? " bias" : "") + (c.residual ? " res" : "");
      s.run("linear_forward", dtype_name(t), shape, [&] {
        auto x = s.make({c.n, c.in}, t, 120);
        auto w = s.make({c.out, c.in}, t, 121, 0.05f);
        auto bias = s.make({c.out}, t, 122);
        auto res = s.make({c.n, c.out}, t, 123);
        auto y = s.output({c.n, c.out}, t);
        const Tensor none;
        cpu::linear_forward(x.cpu, w.cpu, c.bias ? bias.cpu : none, c.residual ? res.cpu : none, y.cpu);
        gpu::linear_forward(x.gpu, w.gpu, c.bias ? bias.gpu : none, c.residual ? res.gpu : none, y.gpu);
        s.compare("linear_forward", t, shape, y.gpu, y.cpu);
      });
      // The weight gradient into f32 (the training case) and, on the small shapes, into the compute dtype.
      for (bool f32_grad : {true, false}) {
        if (!f32_grad && (c.n > 64 || t == DType::F32)) continue;
        const std::string wshape = dims({c.n, c.in, c.out}) + (c.bias ? " dbias" : "") + (f32_grad ? " dW32" : "");
        s.run("linear_weight_grad", dtype_name(t), wshape, [&] {
          auto dy = s.make({c.n, c.out}, t, 124);
          auto x = s.make({c.n, c.in}, t, 125);
          auto dw = s.make({c.out, c.in}, f32_grad ? DType::F32 : t, 126);  // accumulates
          auto db = s.make({c.out}, DType::F32, 127);                       // accumulates
          const Tensor none;
          cpu::linear_weight_grad(dy.cpu, x.cpu, dw.cpu, c.bias ? db.cpu : none);
          gpu::linear_weight_grad(dy.gpu, x.gpu, dw.gpu, c.bias ? db.gpu : none);
          s.compare("linear_weight_grad dweight", t, wshape, dw.gpu, dw.cpu);
          if (c.bias) s.compare("linear_weight_grad dbias", t, wshape, db.gpu, db.cpu);
        });
      }
    }
  }
  // Which path the products took: an epilogue cuBLASLt has no algorithm for falls back to separate passes (correct
  // either way; slower).
  const gpu::EpilogueCounts e = gpu::epilogue_counts(s.dev());
  std::printf("cuBLASLt epilogue plans: %lld bias, %lld bias gradient; %lld fell back to separate passes\n",
              static_cast<long long>(e.bias), static_cast<long long>(e.bias_grad),
              static_cast<long long>(e.unsupported));
}

void check_elementwise(Suite& s) {
  for (DType t : kFloatTypes) {
    const std::string tn = dtype_name(t);
    // bias_backward: 13 columns one a thread, the rest in packs; 8192 rows by 1600, 4800 and 6400 are the 1.64B's
    // proj and out, qkv and fc gradients.
    for (const auto& [n, c] : std::vector<std::pair<int64_t, int64_t>>{
             {7, 13}, {1000, 24}, {2048, 1600}, {8192, 1600}, {8192, 4800}, {8192, 6400}}) {
      const std::string shape = dims({n, c});
      s.run("add_bias", tn, shape, [&] {
        auto y = s.make({n, c}, t, 10);
        auto bias = s.make({c}, t, 11);
        cpu::add_bias(y.cpu, bias.cpu);
        gpu::add_bias(y.gpu, bias.gpu);
        s.compare("add_bias", t, shape, y.gpu, y.cpu);
      });
      s.run("bias_backward", tn, shape, [&] {
        auto dy = s.make({n, c}, t, 12);
        auto db = s.make({c}, DType::F32, 13);  // accumulates
        Tensor again = Tensor::empty({c}, DType::F32, s.dev(), "dbias copy");
        again.copy_from(db.gpu);
        cpu::bias_backward(dy.cpu, db.cpu);
        gpu::bias_backward(dy.gpu, db.gpu);
        s.compare("bias_backward", t, shape, db.gpu, db.cpu);
        gpu::bias_backward(dy.gpu, again);
        s.row("bias_backward bitwise rerun", tn, shape, same_bits(again, db.gpu) ? 0.0 : 1.0, gpu_check::kOpExact);
      });
    }
    // GELU of a biased input: 13 columns take the scalar path, 6400 (the 1.64B model's fc width) the packed one.
    for (const auto& [n, c] : std::vector<std::pair<int64_t, int64_t>>{{7, 13}, {2048, 6400}}) {
      const std::string shape = dims({n, c});
      s.run("bias_gelu_forward", tn, shape, [&] {
        auto x = s.make({n, c}, t, 14, 2.0f);
        auto bias = s.make({c}, t, 15, 0.5f);
        auto y = s.output({n, c}, t);
        cpu::bias_gelu_forward(x.cpu, bias.cpu, y.cpu);
        gpu::bias_gelu_forward(x.gpu, bias.gpu, y.gpu);
        s.compare("bias_gelu_forward", t, shape, y.gpu, y.cpu);
      });
      s.run("bias_gelu_backward", tn, shape, [&] {
        auto x = s.make({n, c}, t, 16, 2.0f);
        auto bias = s.make({c}, t, 17, 0.5f);
        auto dy = s.make({n, c}, t, 18);
        auto dx = s.output({n, c}, t);
        cpu::bias_gelu_backward(x.cpu, bias.cpu, dy.cpu, dx.cpu);
        gpu::bias_gelu_backward(x.gpu, bias.gpu, dy.gpu, dx.gpu);
        s.compare("bias_gelu_backward", t, shape, dx.gpu, dx.cpu);
      });
    }
    for (int64_t n : {int64_t{5}, int64_t{(1 << 20) + 3}}) {
      const std::string shape = dims({n});
      auto unary = [&](const char* op, auto cpu_fn, auto gpu_fn) {
        s.run(op, tn, shape, [&] {
          auto x = s.make({n}, t, 20);
          auto y = s.output({n}, t);
          cpu_fn(x.cpu, y.cpu);
          gpu_fn(x.gpu, y.gpu);
          s.compare(op, t, shape, y.gpu, y.cpu);
        });
      };
      auto binary = [&](const char* op, auto cpu_fn, auto gpu_fn) {
        s.run(op, tn, shape, [&] {
          auto x = s.make({n}, t, 21);
          auto g = s.make({n}, t, 22);
          auto y = s.output({n}, t);
          cpu_fn(x.cpu, g.cpu, y.cpu);
          gpu_fn(x.gpu, g.gpu, y.gpu);
          s.compare(op, t, shape, y.gpu, y.cpu);
        });
      };
      unary("relu_forward", cpu::relu_forward, gpu::relu_forward);
      unary("gelu_forward", cpu::gelu_forward, gpu::gelu_forward);
      binary("relu_backward", cpu::relu_backward, gpu::relu_backward);
      binary("gelu_backward", cpu::gelu_backward, gpu::gelu_backward);
      binary("add", cpu::add, gpu::add);
      s.run("add in place", tn, shape, [&] {
        auto a = s.make({n}, t, 23);
        auto b = s.make({n}, t, 24);
        cpu::add(a.cpu, b.cpu, a.cpu);
        gpu::add(a.gpu, b.gpu, a.gpu);
        s.compare("add in place", t, shape, a.gpu, a.cpu);
      });
      s.run("add unaligned view", tn, shape, [&] {
        // One element in: every pointer off the 16-byte grid, so the scalar path runs.
        auto a = s.make({n + 1}, t, 25);
        auto b = s.make({n + 1}, t, 26);
        auto y = s.output({n + 1}, t);
        cpu::add(a.cpu.flat_slice(1, n, {n}), b.cpu.flat_slice(1, n, {n}), y.cpu.flat_slice(1, n, {n}));
        gpu::add(a.gpu.flat_slice(1, n, {n}), b.gpu.flat_slice(1, n, {n}), y.gpu.flat_slice(1, n, {n}));
        s.compare("add unaligned view", t, shape, y.gpu.flat_slice(1, n, {n}), y.cpu.flat_slice(1, n, {n}));
      });
      s.run("axpy", tn, shape, [&] {
        auto x = s.make({n}, t, 27);
        auto y = s.make({n}, t, 28);
        cpu::axpy(-0.75f, x.cpu, y.cpu);
        gpu::axpy(-0.75f, x.gpu, y.gpu);
        s.compare("axpy", t, shape, y.gpu, y.cpu);
      });
      s.run("scale", tn, shape, [&] {
        auto x = s.make({n}, t, 29);
        cpu::scale(x.cpu, 1.7f);
        gpu::scale(x.gpu, 1.7f);
        s.compare("scale", t, shape, x.gpu, x.cpu);
      });
      s.run("fill", tn, shape, [&] {
        auto x = s.output({n}, t);
        gpu::fill(x.gpu, -3.25f);
        s.compare("fill", t, shape, x.gpu, std::vector<float>(static_cast<size_t>(n), -3.25f));
      });
    }
    // Dropout (LoRA's): the same Philox decision per logical element on both sides, so exactly the same elements are
    // dropped and the kept ones are scaled once; a block of columns [32, 32 + C) of rows 7.. of a wider tensor.
    for (const auto& [n, c] : std::vector<std::pair<int64_t, int64_t>>{{5, 3}, {4096, 96}}) {
      const std::string shape = dims({n, c});
      s.run("dropout", tn, shape, [&] {
        auto x = s.make({n, c}, t, 31);
        auto y = s.output({n, c}, t);
        cpu::dropout(x.cpu, y.cpu, 0.3f, 5, 77, 7, 2 * c + 32, 32);
        gpu::dropout(x.gpu, y.gpu, 0.3f, 5, 77, 7, 2 * c + 32, 32);
        s.compare("dropout", t, shape, y.gpu, y.cpu);
        const std::vector<float> g = y.gpu.to_host_floats(), w = y.cpu.to_host_floats();
        int64_t differ = 0;
        for (size_t i = 0; i < g.size(); ++i) differ += (g[i] == 0.0f) != (w[i] == 0.0f);
        s.row("dropout mask", tn, shape, static_cast<double>(differ), 0.0, "elements dropped on one side only");
      });
    }
  }
  // Casts: the exact conversion of the host's rounding functions (round to nearest even), so the error should be
  // 0; the bound is a fraction of the target dtype's.
  const int64_t n = (1 << 20) + 1;
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      const std::string name = dtype_name(from) + "->" + dtype_name(to);
      s.run("cast", name, dims({n}), [&] {
        auto x = s.make({n}, from, 30, 100.0f);
        Tensor y = Tensor::empty({n}, to, s.dev(), "cast out");
        s.poison(y);
        gpu::cast(x.gpu, y);
        s.row("cast", name, dims({n}), rel_error(y.to_host_floats(), rounded(x.cpu.to_host_floats(), to)),
              bound_for(to) * gpu_check::kOpCastFraction);
      });
    }
  }
}

// LayerNorm. Shapes: 37 columns and a view off the 16-byte grid take the general kernels; the rest the packed ones,
// across their register layouts (forward 2 to 16 packs a lane; backward 1, 2 or 4 packs a thread: C = 1600 and
// 4096 in bf16 are the 1.64B's and 6.86B's, 6400 the widest packed backward); 8192 rows are the 1.64B's micro-batch.
void check_layernorm(Suite& s) {
  struct Case {
    int64_t n, c;
    bool offset;  // every tensor one element off the 16-byte grid
  };
  const std::vector<Case> cases = {{5, 37, false},      {7, 64, true},       {33, 64, false},     {37, 200, false},
                                   {2048, 1600, false}, {8192, 1600, false}, {4096, 4096, false}, {64, 6400, false}};
  for (DType t : kFloatTypes) {
    for (const Case& k : cases) {
      const int64_t n = k.n, c = k.c, o = k.offset ? 1 : 0;
      const std::string shape = dims({n, c}) + (k.offset ? " unaligned" : "");
      // A (rows, cols) view starting o elements into a tensor of rows * cols + o.
      auto view = [&](const Tensor& whole, int64_t rows, int64_t cols) {
        return whole.flat_slice(o, rows * cols, rows == 1 ? Shape{cols} : Shape{rows, cols});
      };
      auto make = [&](int64_t rows, int64_t cols, DType dt, uint64_t seed, float stddev, float mean = 0.0f) {
        Suite::Pair p = s.make({rows * cols + o}, dt, seed, stddev, mean);
        return Suite::Pair{view(p.cpu, rows, cols), view(p.gpu, rows, cols)};
      };
      auto output = [&](int64_t rows, int64_t cols, DType dt) {
        Suite::Pair p = s.output({rows * cols + o}, dt);
        return Suite::Pair{view(p.cpu, rows, cols), view(p.gpu, rows, cols)};
      };
      s.run("layernorm_forward", dtype_name(t), shape, [&] {
        auto x = make(n, c, t, 40, 2.0f, 0.5f);
        auto gamma = make(1, c, t, 41, 0.2f, 1.0f);
        auto beta = make(1, c, t, 42, 0.2f);
        auto y = output(n, c, t);
        auto mean = s.output({n}, DType::F32);
        auto rstd = s.output({n}, DType::F32);
        cpu::layernorm_forward(x.cpu, gamma.cpu, beta.cpu, y.cpu, mean.cpu, rstd.cpu, 1e-5f);
        gpu::layernorm_forward(x.gpu, gamma.gpu, beta.gpu, y.gpu, mean.gpu, rstd.gpu, 1e-5f);
        s.compare("layernorm_forward y", t, shape, y.gpu, y.cpu);
        s.compare("layernorm_forward mean", t, shape, mean.gpu, mean.cpu);
        s.compare("layernorm_forward rstd", t, shape, rstd.gpu, rstd.cpu);
      });
      for (bool with_res : {false, true}) {
        const std::string op = with_res ? "layernorm_backward_add" : "layernorm_backward";
        s.run(op, dtype_name(t), shape, [&] {
          auto x = make(n, c, t, 43, 2.0f, 0.5f);
          auto gamma = make(1, c, t, 44, 0.2f, 1.0f);
          auto beta = make(1, c, t, 45, 0.2f);
          auto dy = make(n, c, t, 46, 1.0f);
          auto dres = make(n, c, t, 49, 1.0f);
          // Statistics from the CPU forward, shared by both sides.
          Tensor y = Tensor::empty({n, c}, DType::F32, s.host(), "y");
          Tensor mean = Tensor::empty({n}, DType::F32, s.host(), "mean");
          Tensor rstd = Tensor::empty({n}, DType::F32, s.host(), "rstd");
          cpu::layernorm_forward(x.cpu, gamma.cpu, beta.cpu, y, mean, rstd, 1e-5f);
          Tensor mean_g = s.upload(mean, DType::F32), rstd_g = s.upload(rstd, DType::F32);
          auto dx = output(n, c, t);
          auto dgamma = s.make({c}, DType::F32, 47);  // accumulate
          auto dbeta = s.make({c}, DType::F32, 48);
          Tensor dgamma0 = Tensor::empty({c}, DType::F32, s.dev(), "dgamma copy");
          Tensor dbeta0 = Tensor::empty({c}, DType::F32, s.dev(), "dbeta copy");
          dgamma0.copy_from(dgamma.gpu);
          dbeta0.copy_from(dbeta.gpu);
          auto run = [&](const Tensor& out, const Tensor& dg, const Tensor& db) {
            if (with_res) {
              gpu::layernorm_backward_add(dy.gpu, x.gpu, gamma.gpu, mean_g, rstd_g, dres.gpu, out, dg, db);
            } else {
              gpu::layernorm_backward(dy.gpu, x.gpu, gamma.gpu, mean_g, rstd_g, out, dg, db);
            }
          };
          if (with_res) {
            cpu::layernorm_backward_add(dy.cpu, x.cpu, gamma.cpu, mean, rstd, dres.cpu, dx.cpu, dgamma.cpu, dbeta.cpu);
          } else {
            cpu::layernorm_backward(dy.cpu, x.cpu, gamma.cpu, mean, rstd, dx.cpu, dgamma.cpu, dbeta.cpu);
          }
          run(dx.gpu, dgamma.gpu, dbeta.gpu);
          s.compare(op + " dx", t, shape, dx.gpu, dx.cpu);
          s.compare(op + " dgamma", t, shape, dgamma.gpu, dgamma.cpu);
          s.compare(op + " dbeta", t, shape, dbeta.gpu, dbeta.cpu);
          // Determinism: from the same start, the same bits (no atomics in the column sums).
          auto again = output(n, c, t);
          run(again.gpu, dgamma0, dbeta0);
          const bool same =
              same_bits(again.gpu, dx.gpu) && same_bits(dgamma0, dgamma.gpu) && same_bits(dbeta0, dbeta.gpu);
          s.row(op + " bitwise rerun", dtype_name(t), shape, same ? 0.0 : 1.0, gpu_check::kOpExact);
          // In place: dx in dy's memory (the contract allows it).
          if (!with_res) {
            gpu::layernorm_backward(dy.gpu, x.gpu, gamma.gpu, mean_g, rstd_g, dy.gpu, dgamma0, dbeta0);
            s.compare(op + " in place dx", t, shape, dy.gpu, dx.cpu);
          }
        });
      }
    }
  }
}

void check_embedding(Suite& s) {
  struct Case {
    int64_t n, v, c;
    int64_t id_range;  // ids drawn from [0, id_range): small ranges repeat ids a lot
    int64_t start, v_local;
  };
  const std::vector<Case> cases = {
      {9, 11, 5, 11, 0, 11},
      {2048, 50304, 1600, 50304, 0, 50304},      // B=2, T=1024, GPT-2 vocabulary
      {8192, 50304, 1600, 64, 0, 50304},         // 64 distinct ids, each ~128 times
      {2048, 50304, 1600, 50304, 10000, 20000},  // a vocabulary shard
  };
  for (DType t : kFloatTypes) {
    for (const Case& c : cases) {
      const std::string shape = dims({c.n, c.v_local, c.c}) + (c.start ? " @" + std::to_string(c.start) : "") +
                                (c.id_range < c.v ? " ids<" + std::to_string(c.id_range) : "");
      const std::vector<int32_t> id_values = random_ids(c.n, 50 + c.n, 0, c.id_range);
      s.run("embedding_forward", dtype_name(t), shape, [&] {
        auto ids = s.ids(id_values);
        auto table = s.make({c.v_local, c.c}, t, 51);
        auto y = s.output({c.n, c.c}, t);
        cpu::embedding_forward(ids.cpu, table.cpu, y.cpu, c.start, c.v);
        gpu::embedding_forward(ids.gpu, table.gpu, y.gpu, c.start, c.v);
        s.compare("embedding_forward", t, shape, y.gpu, y.cpu);
      });
      s.run("embedding_backward", dtype_name(t), shape, [&] {
        auto ids = s.ids(id_values);
        auto dy = s.make({c.n, c.c}, t, 52);
        auto dtable = s.make({c.v_local, c.c}, DType::F32, 53);  // accumulates
        const int64_t vocab = c.start ? ops::kUncheckedVocab : c.v;
        Tensor before = Tensor::empty(dtable.gpu.shape(), DType::F32, s.dev(), "dtable copy");
        before.copy_from(dtable.gpu);
        cpu::embedding_backward(ids.cpu, dy.cpu, dtable.cpu, c.start, vocab);
        gpu::embedding_backward(ids.gpu, dy.gpu, dtable.gpu, c.start, vocab);
        s.compare("embedding_backward", t, shape, dtable.gpu, dtable.cpu);
        // Determinism: a second run from the same start gives the same bits.
        gpu::embedding_backward(ids.gpu, dy.gpu, before, c.start, vocab);
        const std::vector<float> a = dtable.gpu.to_host_floats(), b = before.to_host_floats();
        const bool same = std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
        s.row("embedding_backward bitwise rerun", dtype_name(t), shape, same ? 0.0 : 1.0, gpu_check::kOpExact);
      });
    }
    for (const auto& [b, tt, tmax, c] : std::vector<std::array<int64_t, 4>>{{3, 5, 7, 9}, {2, 1024, 1024, 1600}}) {
      const std::string shape = dims({b, tt, c}) + " Tmax=" + std::to_string(tmax);
      s.run("add_positions", dtype_name(t), shape, [&] {
        auto y = s.make({b, tt, c}, t, 54);
        auto pos = s.make({tmax, c}, t, 55);
        cpu::add_positions(y.cpu, pos.cpu);
        gpu::add_positions(y.gpu, pos.gpu);
        s.compare("add_positions", t, shape, y.gpu, y.cpu);
      });
      s.run("add_positions_backward", dtype_name(t), shape, [&] {
        auto dy = s.make({b, tt, c}, t, 56);
        auto dpos = s.make({tmax, c}, DType::F32, 57);  // accumulates into rows 0..T-1
        cpu::add_positions_backward(dy.cpu, dpos.cpu);
        gpu::add_positions_backward(dy.gpu, dpos.gpu);
        s.compare("add_positions_backward", t, shape, dpos.gpu, dpos.cpu);
      });
    }
  }
}

void check_cross_entropy(Suite& s) {
  struct Case {
    int64_t n, v;
  };
  for (DType t : kFloatTypes) {
    for (const Case& c : std::vector<Case>{{5, 17}, {2048, 50304}}) {
      const std::string shape = dims({c.n, c.v});
      std::vector<int32_t> target_values = random_ids(c.n, 70 + c.n, 0, c.v);
      // Every seventh row does not count (a masked position): no loss, no gradient.
      for (size_t i = 3; i < target_values.size(); i += 7) target_values[i] = ops::kIgnoreTarget;
      // d(mean loss)/d(row loss) = 1/N; with f16, times a loss scale as f16 training uses (without it most of the
      // gradient, ~1e-8, sits in f16's subnormals and the check would measure underflow, not the kernel).
      const float scale = (t == DType::F16 ? 1024.0f : 1.0f) / static_cast<float>(c.n);
      s.run("cross_entropy_forward", dtype_name(t), shape, [&] {
        auto logits = s.make({c.n, c.v}, t, 71, 2.0f);
        auto targets = s.ids(target_values);
        auto losses = s.output({c.n}, DType::F32);
        auto lse = s.output({c.n}, DType::F32);
        cpu::cross_entropy_forward(logits.cpu, targets.cpu, losses.cpu, lse.cpu);
        gpu::cross_entropy_forward(logits.gpu, targets.gpu, losses.gpu, lse.gpu);
        s.compare("cross_entropy_forward losses", t, shape, losses.gpu, losses.cpu);
        s.compare("cross_entropy_forward lse", t, shape, lse.gpu, lse.cpu);
      });
      s.run("cross_entropy_backward", dtype_name(t), shape, [&] {
        auto logits = s.make({c.n, c.v}, t, 72, 2.0f);
        auto targets = s.ids(target_values);
        Tensor losses = Tensor::empty({c.n}, DType::F32, s.host(), "losses");
        Tensor lse = Tensor::empty({c.n}, DType::F32, s.host(), "lse");
        cpu::cross_entropy_forward(logits.cpu, targets.cpu, losses, lse);
        Tensor lse_g = s.upload(lse, DType::F32);
        auto dlogits = s.output({c.n, c.v}, t);
        cpu::cross_entropy_backward(logits.cpu, targets.cpu, lse, scale, dlogits.cpu, 0, c.v);
        gpu::cross_entropy_backward(logits.gpu, targets.gpu, lse_g, scale, dlogits.gpu, 0, c.v);
        s.compare("cross_entropy_backward", t, shape, dlogits.gpu, dlogits.cpu);
        // In place: dlogits is the logits tensor.
        gpu::cross_entropy_backward(logits.gpu, targets.gpu, lse_g, scale, logits.gpu, 0, c.v);
        s.compare("cross_entropy_backward in place", t, shape, logits.gpu, dlogits.cpu);
      });
      // A vocabulary shard: columns [start, start + v_local) of the full vocabulary.
      const int64_t v_local = std::max<int64_t>(1, c.v * 2 / 5), start = c.v / 5;
      const std::string shard = dims({c.n, v_local}) + " @" + std::to_string(start);
      s.run("cross_entropy sharded", dtype_name(t), shard, [&] {
        auto logits = s.make({c.n, v_local}, t, 73, 2.0f);
        auto targets = s.ids(target_values);
        auto row_max = s.output({c.n}, DType::F32);
        auto picked = s.output({c.n}, DType::F32);
        cpu::cross_entropy_stats(logits.cpu, targets.cpu, start, c.v, row_max.cpu, picked.cpu);
        gpu::cross_entropy_stats(logits.gpu, targets.gpu, start, c.v, row_max.gpu, picked.gpu);
        s.compare("cross_entropy_stats row_max", t, shard, row_max.gpu, row_max.cpu);
        s.compare("cross_entropy_stats target_logit", t, shard, picked.gpu, picked.cpu);
        auto sum_exp = s.output({c.n}, DType::F32);
        Tensor row_max_g = s.upload(row_max.cpu, DType::F32);
        cpu::row_sum_exp(logits.cpu, row_max.cpu, sum_exp.cpu);
        gpu::row_sum_exp(logits.gpu, row_max_g, sum_exp.gpu);
        s.compare("row_sum_exp", t, shard, sum_exp.gpu, sum_exp.cpu);
        // This shard's own log-sum-exp as the lse (any consistent value tests the backward).
        Tensor lse = Tensor::empty({c.n}, DType::F32, s.host(), "lse");
        for (int64_t i = 0; i < c.n; ++i) lse.f32()[i] = row_max.cpu.f32()[i] + std::log(sum_exp.cpu.f32()[i]);
        Tensor lse_g = s.upload(lse, DType::F32);
        auto dlogits = s.output({c.n, v_local}, t);
        cpu::cross_entropy_backward(logits.cpu, targets.cpu, lse, scale, dlogits.cpu, start, ops::kUncheckedVocab);
        gpu::cross_entropy_backward(logits.gpu, targets.gpu, lse_g, scale, dlogits.gpu, start, ops::kUncheckedVocab);
        s.compare("cross_entropy_backward sharded", t, shard, dlogits.gpu, dlogits.cpu);
      });
    }
  }
  // finish: lse = row_max + log(sum_exp); loss_sum += sum(lse - target_logit) over the rows that count (every
  // third does not). Host reference.
  for (int64_t n : {int64_t{3}, int64_t{16384}}) {
    s.run("cross_entropy_finish", "f32", dims({n}), [&] {
      auto row_max = s.make({n}, DType::F32, 80);
      auto picked = s.make({n}, DType::F32, 81);
      std::vector<float> sum_exp(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) sum_exp[i] = 1.0f + 1000.0f * uniform_at(82, 0, i);
      auto lse = s.from_values({n}, DType::F32, sum_exp);
      auto loss_sum = s.from_values({1}, DType::F32, {2.5f});
      std::vector<int32_t> target_values(static_cast<size_t>(n), 1);
      for (size_t i = 1; i < target_values.size(); i += 3) target_values[i] = ops::kIgnoreTarget;
      auto targets = s.ids(target_values);
      std::vector<float> want_lse(static_cast<size_t>(n));
      double total = 2.5;
      for (int64_t i = 0; i < n; ++i) {
        want_lse[i] = row_max.cpu.f32()[i] + std::log(sum_exp[i]);
        if (target_values[static_cast<size_t>(i)] != ops::kIgnoreTarget)
          total += static_cast<double>(want_lse[i]) - picked.cpu.f32()[i];
      }
      gpu::cross_entropy_finish(row_max.gpu, picked.gpu, lse.gpu, targets.gpu, loss_sum.gpu);
      s.compare("cross_entropy_finish lse", DType::F32, dims({n}), lse.gpu, want_lse);
      s.compare("cross_entropy_finish loss_sum", DType::F32, dims({n}), loss_sum.gpu,
                std::vector<float>{static_cast<float>(total)});
    });
  }
}

void check_reduce_and_adamw(Suite& s) {
  for (DType t : kFloatTypes) {
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{10'000'019}}) {
      s.run("sum_squares", dtype_name(t), dims({n}), [&] {
        auto x = s.make({n}, t, 90);
        const double want = cpu::sum_squares(x.cpu);
        const double got = gpu::sum_squares(x.gpu);
        s.row("sum_squares", dtype_name(t), dims({n}), std::abs(got - want) / want, gpu_check::kOpSumSquares);
      });
    }
    // A list of every size above and an empty tensor: the CPU's double sum, and the bits of the loop over the
    // single-tensor op (the same adds in the same order, on the device instead of the host).
    s.run("sum_squares_total", dtype_name(t), "4 tensors", [&] {
      std::vector<Tensor> cpu_list, gpu_list;
      uint64_t seed = 92;
      for (int64_t n : {int64_t{1000}, int64_t{0}, int64_t{10'000'019}, int64_t{1}}) {
        auto x = s.make({n}, t, seed++);
        cpu_list.push_back(x.cpu);
        gpu_list.push_back(x.gpu);
      }
      const double want = cpu::sum_squares_total(cpu_list);
      const double got = gpu::sum_squares_total(gpu_list);
      s.row("sum_squares_total", dtype_name(t), "4 tensors", std::abs(got - want) / want, gpu_check::kOpSumSquares);
      double loop = 0;
      for (const Tensor& x : gpu_list) loop += gpu::sum_squares(x);
      s.row("sum_squares_total = loop, bitwise", dtype_name(t), "4 tensors", got == loop ? 0.0 : 1.0,
            gpu_check::kOpExact);
      std::vector<float> v = normals(1000, 93);
      v[3] = INFINITY;
      gpu_list.push_back(s.from_values({1000}, t, v).gpu);
      s.row("sum_squares_total inf", dtype_name(t), "5 tensors",
            std::isinf(gpu::sum_squares_total(gpu_list)) ? 0.0 : 1.0, gpu_check::kOpExact);
    });
    s.run("sum_squares inf", dtype_name(t), dims({1000}), [&] {
      std::vector<float> v = normals(1000, 91);
      v[517] = INFINITY;
      auto x = s.from_values({1000}, t, v);
      const double got = gpu::sum_squares(x.gpu);
      s.row("sum_squares inf", dtype_name(t), dims({1000}), std::isinf(got) ? 0.0 : 1.0, gpu_check::kOpExact);
    });
  }
  for (int64_t n : {int64_t{7}, int64_t{(1 << 20) + 5}}) {
    s.run("adamw_step", "f32", dims({n}), [&] {
      auto param = s.make({n}, DType::F32, 100);
      auto grad = s.make({n}, DType::F32, 101);
      auto m = s.make({n}, DType::F32, 102, 0.1f);
      std::vector<float> vv = normals(n, 103, 0.01f);
      for (float& x : vv) x = x * x;  // second moments are non-negative
      auto v = s.from_values({n}, DType::F32, vv);
      ops::AdamWParams p;
      p.lr = 3e-3f;
      p.weight_decay = 0.1f;
      p.step = 10;
      p.grad_scale = 0.5f;
      cpu::adamw_step(param.cpu, grad.cpu, m.cpu, v.cpu, p);
      gpu::adamw_step(param.gpu, grad.gpu, m.gpu, v.gpu, p);
      s.compare("adamw_step param", DType::F32, dims({n}), param.gpu, param.cpu);
      s.compare("adamw_step m", DType::F32, dims({n}), m.gpu, m.cpu);
      s.compare("adamw_step v", DType::F32, dims({n}), v.gpu, v.cpu);
    });
  }
}

// Bad ids and targets are reported by the kernels and thrown at the next synchronize.
void check_deferred_errors(Suite& s) {
  s.run("deferred error: embedding id", "bf16", dims({4, 8}), [&] {
    auto ids = s.ids({1, 2, 99, 3});
    auto table = s.make({10, 8}, DType::BF16, 110);
    auto y = s.output({4, 8}, DType::BF16);
    gpu::embedding_forward(ids.gpu, table.gpu, y.gpu, 0, 10);
    std::string message;
    try {
      s.dev().synchronize();
    } catch (const Error& e) {
      message = e.what();
    }
    const bool ok = message.find("99") != std::string::npos && message.find("row 2") != std::string::npos;
    s.row("deferred error: embedding id", "bf16", dims({4, 8}), ok ? 0.0 : 1.0, gpu_check::kOpExact,
          message.substr(0, 80));
    s.dev().synchronize();  // the slot was cleared: no second throw
  });
  s.run("deferred error: target", "f32", dims({3, 5}), [&] {
    auto logits = s.make({3, 5}, DType::F32, 111);
    auto targets = s.ids({0, -4, 2});
    auto losses = s.output({3}, DType::F32);
    auto lse = s.output({3}, DType::F32);
    gpu::cross_entropy_forward(logits.gpu, targets.gpu, losses.gpu, lse.gpu);
    std::string message;
    try {
      s.dev().synchronize();
    } catch (const Error& e) {
      message = e.what();
    }
    const bool ok = message.find("-4") != std::string::npos;
    s.row("deferred error: target", "f32", dims({3, 5}), ok ? 0.0 : 1.0, gpu_check::kOpExact, message.substr(0, 80));
  });
}

// ---- the Llama-family ops: RMSNorm, rotary embedding, SwiGLU, grouped-query attention ----

void check_rmsnorm(Suite& s) {
  // 37 columns: partial warps, the general kernels; the rest the one-pass backward: 24 (3 packs of halves, 6 of f32,
  // rows not a multiple of a group), (4096, 2048): B=2 T=2048 rows of a Llama 3.2 1B hidden state (1 or 2 packs a
  // thread), 4096 (2 or 4), 8192 (4 for halves, the general kernels for f32).
  for (DType t : kFloatTypes) {
    for (const auto& [n, c] :
         std::vector<std::pair<int64_t, int64_t>>{{5, 37}, {7, 24}, {4096, 2048}, {9, 4096}, {37, 8192}}) {
      const std::string shape = dims({n, c});
      s.run("rmsnorm_forward", dtype_name(t), shape, [&] {
        auto x = s.make({n, c}, t, 200, 2.0f, 0.5f);
        auto gamma = s.make({c}, t, 201, 0.2f, 1.0f);
        auto y = s.output({n, c}, t);
        auto rstd = s.output({n}, DType::F32);
        cpu::rmsnorm_forward(x.cpu, gamma.cpu, y.cpu, rstd.cpu, 1e-5f);
        gpu::rmsnorm_forward(x.gpu, gamma.gpu, y.gpu, rstd.gpu, 1e-5f);
        s.compare("rmsnorm_forward y", t, shape, y.gpu, y.cpu);
        s.compare("rmsnorm_forward rstd", t, shape, rstd.gpu, rstd.cpu);
        auto rstd2 = s.output({n}, DType::F32);
        gpu::rmsnorm_forward(x.gpu, gamma.gpu, x.gpu, rstd2.gpu, 1e-5f);  // in place: y is x
        s.compare("rmsnorm_forward in place", t, shape, x.gpu, y.cpu);
      });
      // The backward, and with a residual gradient (rmsnorm_backward_add), each against the CPU op, in place
      // (dx is dy) too, and dgamma bit for bit on a rerun.
      for (const bool add : {false, true}) {
        const std::string op = add ? "rmsnorm_backward_add" : "rmsnorm_backward";
        s.run(op, dtype_name(t), shape, [&] {
          auto x = s.make({n, c}, t, 202, 2.0f, 0.5f);
          auto gamma = s.make({c}, t, 203, 0.2f, 1.0f);
          auto dy = s.make({n, c}, t, 204);
          auto dres = s.make({n, c}, t, 209);
          // rstd from the CPU forward, shared by both sides.
          Tensor y = Tensor::empty({n, c}, DType::F32, s.host(), "y");
          Tensor rstd = Tensor::empty({n}, DType::F32, s.host(), "rstd");
          cpu::rmsnorm_forward(x.cpu, gamma.cpu, y, rstd, 1e-5f);
          Tensor rstd_g = s.upload(rstd, DType::F32);
          auto dx = s.output({n, c}, t);
          auto dgamma = s.make({c}, DType::F32, 205);  // accumulates
          Tensor dgamma_again = Tensor::empty({c}, DType::F32, s.dev(), "dgamma copy");
          dgamma_again.copy_from(dgamma.gpu);
          auto gpu_backward = [&](const Tensor& dy_g, const Tensor& dx_g, const Tensor& dg) {
            if (add) {
              gpu::rmsnorm_backward_add(dy_g, x.gpu, gamma.gpu, rstd_g, dres.gpu, dx_g, dg);
            } else {
              gpu::rmsnorm_backward(dy_g, x.gpu, gamma.gpu, rstd_g, dx_g, dg);
            }
          };
          if (add) {
            cpu::rmsnorm_backward_add(dy.cpu, x.cpu, gamma.cpu, rstd, dres.cpu, dx.cpu, dgamma.cpu);
          } else {
            cpu::rmsnorm_backward(dy.cpu, x.cpu, gamma.cpu, rstd, dx.cpu, dgamma.cpu);
          }
          gpu_backward(dy.gpu, dx.gpu, dgamma.gpu);
          s.compare(op + " dx", t, shape, dx.gpu, dx.cpu);
          s.compare(op + " dgamma", t, shape, dgamma.gpu, dgamma.cpu);
          gpu_backward(dy.gpu, dy.gpu, dgamma_again);  // in place: dx is dy
          s.compare(op + " in place", t, shape, dy.gpu, dx.cpu);
          s.row(op + " dgamma bitwise rerun", dtype_name(t), shape, same_bits(dgamma.gpu, dgamma_again) ? 0.0 : 1.0,
                gpu_check::kOpExact);
        });
      }
    }
  }
}

void check_rotary(Suite& s) {
  struct Case {
    int64_t b, t, heads, kv_heads, d, t_max;  // a fused qkv (B, T, (H + 2 Hkv) D); q and k rotated
  };
  // D=6: the scalar kernel; D=8: 16-byte packs of f32 only; D=16: one pack of halves per half head; then the
  // model's shapes, packed.
  const std::vector<Case> cases = {{3, 5, 3, 1, 6, 7},
                                   {2, 7, 4, 2, 8, 9},
                                   {3, 5, 2, 1, 16, 5},
                                   {2, 1024, 32, 8, 64, 2048},
                                   {2, 1024, 32, 8, 128, 1024}};
  for (DType t : kFloatTypes) {
    for (const Case& c : cases) {
      const int64_t w = (c.heads + 2 * c.kv_heads) * c.d;
      const int rotated = static_cast<int>(c.heads + c.kv_heads);
      const std::string shape = dims({c.b, c.t, w}) + " D=" + std::to_string(c.d);
      // Llama 3.1's frequencies.
      ops::RopeScaling scaling;
      scaling.rope_type = "llama3";
      const ops::RopeTables tables = ops::rope_tables(ops::rope_inverse_frequencies(c.d, 500000.0, scaling), c.t_max);
      for (bool backward : {false, true}) {
        const std::string op = backward ? "rotary_backward" : "rotary_forward";
        s.run(op, dtype_name(t), shape, [&] {
          auto cos = s.from_values({c.t_max, c.d / 2}, DType::F32, tables.cos);
          auto sin = s.from_values({c.t_max, c.d / 2}, DType::F32, tables.sin);
          auto x = s.make({c.b, c.t, w}, t, backward ? 211 : 210);
          auto y = s.output({c.b, c.t, w}, t);
          auto fn_cpu = backward ? cpu::rotary_backward : cpu::rotary_forward;
          auto fn_gpu = backward ? gpu::rotary_backward : gpu::rotary_forward;
          fn_cpu(x.cpu, cos.cpu, sin.cpu, rotated, y.cpu);
          fn_gpu(x.gpu, cos.gpu, sin.gpu, rotated, y.gpu);
          s.compare(op, t, shape, y.gpu, y.cpu);
          fn_gpu(x.gpu, cos.gpu, sin.gpu, rotated, x.gpu);  // in place on the fused qkv: v left alone
          s.compare(op + " in place", t, shape, x.gpu, y.cpu);
        });
      }
    }
  }
}

void check_swiglu(Suite& s) {
  // 13 columns: odd, the scalar kernel; 20: 16-byte packs of f32 but not of halves (scalar there); 8: one pack of
  // halves per row; (4096, 8192): B=2 T=2048 rows of Llama 3.2 1B's MLP, packed.
  for (DType t : kFloatTypes) {
    for (const auto& [n, f] : std::vector<std::pair<int64_t, int64_t>>{{7, 13}, {6, 20}, {5, 8}, {4096, 8192}}) {
      const std::string shape = dims({n, 2 * f});
      s.run("swiglu_forward", dtype_name(t), shape, [&] {
        auto gate_up = s.make({n, 2 * f}, t, 220, 2.0f);
        auto y = s.output({n, f}, t);
        cpu::swiglu_forward(gate_up.cpu, y.cpu);
        gpu::swiglu_forward(gate_up.gpu, y.gpu);
        s.compare("swiglu_forward", t, shape, y.gpu, y.cpu);
      });
      s.run("swiglu_backward", dtype_name(t), shape, [&] {
        auto gate_up = s.make({n, 2 * f}, t, 221, 2.0f);
        auto dy = s.make({n, f}, t, 222);
        auto dgate_up = s.output({n, 2 * f}, t);
        cpu::swiglu_backward(gate_up.cpu, dy.cpu, dgate_up.cpu);
        gpu::swiglu_backward(gate_up.gpu, dy.gpu, dgate_up.gpu);
        s.compare("swiglu_backward", t, shape, dgate_up.gpu, dgate_up.cpu);
        gpu::swiglu_backward(gate_up.gpu, dy.gpu, gate_up.gpu);  // in place: dgate_up is gate_up
        s.compare("swiglu_backward in place", t, shape, gate_up.gpu, dgate_up.cpu);
      });
    }
  }
}

void check_attention_gqa(Suite& s) {
  struct Case {
    int64_t b, t, h, kv, d;
  };
  // Small odd shapes, multi-query, a head dim cuDNN refuses (12: the plain kernels run in every dtype), Llama's
  // 32 query heads over 8 kv heads at D = 64 and D = 128, and multi-head attention (Hkv = H, the gpt's
  // attention_forward / attention_backward): small odd shapes and the gpt 1.64B's 25 heads of 64.
  const std::vector<Case> cases = {{1, 7, 4, 2, 8},  {2, 77, 6, 2, 16},    {1, 33, 4, 1, 64},
                                   {2, 9, 4, 2, 12}, {2, 1024, 32, 8, 64}, {2, 1024, 32, 8, 128},
                                   {1, 7, 2, 2, 8},  {2, 77, 3, 3, 16},    {2, 1024, 25, 25, 64}};
  for (DType t : kFloatTypes) {
    for (const Case& c : cases) {
      for (bool plain : {false, true}) {
        if (plain && t == DType::F32) continue;  // f32 always runs the plain kernels
        const int64_t w = (c.h + 2 * c.kv) * c.d, cy = c.h * c.d;
        const int heads = static_cast<int>(c.h), kv = static_cast<int>(c.kv);
        const std::string shape = dims({c.b, c.t, c.h, c.d}) + " Hkv=" + std::to_string(c.kv) + (plain ? " plain" : "");
        const std::string fwd = "attention_gqa_forward", bwd = "attention_gqa_backward";
        s.run(fwd, dtype_name(t), shape, [&] {
          auto qkv = s.make({c.b, c.t, w}, t, 230);
          auto y = s.output({c.b, c.t, cy}, t);
          auto lse = s.output({c.b, c.h, c.t}, DType::F32);
          cpu::attention_gqa_forward(qkv.cpu, heads, kv, y.cpu, lse.cpu);
          if (plain) {
            gpu::attention_gqa_forward_plain(qkv.gpu, heads, kv, y.gpu, lse.gpu);
          } else {
            gpu::attention_gqa_forward(qkv.gpu, heads, kv, y.gpu, lse.gpu);
          }
          s.compare(fwd + " y", t, shape, y.gpu, y.cpu);
          s.compare(fwd + " lse", t, shape, lse.gpu, lse.cpu);
        });
        s.run(bwd, dtype_name(t), shape, [&] {
          auto qkv = s.make({c.b, c.t, w}, t, 231);
          auto dy = s.make({c.b, c.t, cy}, t, 232);
          // The CPU forward's y and lse feed both backwards, so only the backward is compared.
          Tensor y = Tensor::empty({c.b, c.t, cy}, DType::F32, s.host(), "y");
          Tensor lse = Tensor::empty({c.b, c.h, c.t}, DType::F32, s.host(), "lse");
          cpu::attention_gqa_forward(qkv.cpu, heads, kv, y, lse);
          Tensor y_g = s.upload(y, t), lse_g = s.upload(lse, DType::F32);
          auto dqkv = s.output({c.b, c.t, w}, t);
          cpu::attention_gqa_backward(qkv.cpu, heads, kv, y, lse, dy.cpu, dqkv.cpu);
          auto run = [&](const Tensor& out) {
            if (plain) {
              gpu::attention_gqa_backward_plain(qkv.gpu, heads, kv, y_g, lse_g, dy.gpu, out);
            } else {
              gpu::attention_gqa_backward(qkv.gpu, heads, kv, y_g, lse_g, dy.gpu, out);
            }
          };
          run(dqkv.gpu);
          s.compare(bwd + " dqkv", t, shape, dqkv.gpu, dqkv.cpu);
          Tensor again = Tensor::empty(dqkv.gpu.shape(), t, s.dev(), "dqkv again");
          s.poison(again);
          run(again);
          s.row(bwd + " bitwise rerun", dtype_name(t), shape, same_bits(dqkv.gpu, again) ? 0.0 : 1.0,
                gpu_check::kOpExact);
        });
      }
    }
  }
}

// ---- timings ----

template <class F>
double median_ms(CudaDevice& dev, F&& f, int warmup = 3, int reps = 20) {
  for (int i = 0; i < warmup; ++i) f();
  dev.synchronize();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    device::CudaEvent start(true), stop(true);
    start.record(dev.compute_stream());
    f();
    stop.record(dev.compute_stream());
    stop.synchronize();
    ms.push_back(stop.ms_since(start));
  }
  std::sort(ms.begin(), ms.end());
  return (ms[reps / 2 - 1] + ms[reps / 2]) / 2.0;
}

void bench(CudaDevice& dev) {
  std::printf("\n%-44s %10s %14s\n", "timing (median of 20, after 3 warm-ups)", "ms", "rate");
  // amount: FLOPs (printed as TFLOP/s) or bytes moved (printed as GB/s).
  auto print = [](const std::string& what, double ms, double amount, const char* unit) {
    const double per_second = amount / (ms * 1e-3);
    const double shown = std::string(unit) == "TFLOP/s" ? per_second / 1e12 : per_second / 1e9;
    std::printf("%-44s %10.3f %10.1f %s\n", what.c_str(), ms, shown, unit);
    std::fflush(stdout);
  };
  const DType bf = DType::BF16;
  {
    const int64_t n = 8192;
    Tensor a = Tensor::empty({n, n}, bf, dev, "a"), b = Tensor::empty({n, n}, bf, dev, "b");
    Tensor c = Tensor::empty({n, n}, bf, dev, "c");
    gpu::fill(a, 0.01f);
    gpu::fill(b, 0.02f);
    const double ms = median_ms(dev, [&] { gpu::matmul(a, b, c, false, false, 0.0f); });
    print("matmul bf16 8192^3", ms, 2.0 * n * n * n, "TFLOP/s");
    const double ms_t = median_ms(dev, [&] { gpu::matmul(a, b, c, false, true, 0.0f); });
    print("matmul bf16 8192^3, b transposed", ms_t, 2.0 * n * n * n, "TFLOP/s");
  }
  {
    const int64_t B = 8, T = 1024, H = 25, D = 64, C = H * D;
    Tensor qkv = Tensor::empty({B, T, 3 * C}, bf, dev, "qkv"), y = Tensor::empty({B, T, C}, bf, dev, "y");
    Tensor lse = Tensor::empty({B, H, T}, DType::F32, dev, "lse"), dy = Tensor::empty({B, T, C}, bf, dev, "dy");
    Tensor dqkv = Tensor::empty({B, T, 3 * C}, bf, dev, "dqkv");
    gpu::fill(qkv, 0.1f);
    gpu::fill(dy, 0.01f);
    // Causal: half of the T x T scores. Forward 2 matmuls (QK^T, PV), backward 5 (2.5x the forward).
    const double flops = 4.0 * B * H * T * T * D / 2.0;
    const double f = median_ms(dev, [&] { gpu::attention_gqa_forward(qkv, H, H, y, lse); });
    print("attention bf16 fwd (B=8 T=1024 H=25 D=64)", f, flops, "TFLOP/s");
    const double b = median_ms(dev, [&] { gpu::attention_gqa_backward(qkv, H, H, y, lse, dy, dqkv); });
    print("attention bf16 bwd (B=8 T=1024 H=25 D=64)", b, 2.5 * flops, "TFLOP/s");
  }
  {
    const int64_t N = 8192, C = 1600;
    Tensor x = Tensor::empty({N, C}, bf, dev, "x"), y = Tensor::empty({N, C}, bf, dev, "y");
    Tensor g = Tensor::empty({C}, bf, dev, "gamma"), be = Tensor::empty({C}, bf, dev, "beta");
    Tensor mean = Tensor::empty({N}, DType::F32, dev, "mean"), rstd = Tensor::empty({N}, DType::F32, dev, "rstd");
    Tensor dg = Tensor::zeros({C}, DType::F32, dev, "dgamma"), db = Tensor::zeros({C}, DType::F32, dev, "dbeta");
    Tensor dx = Tensor::empty({N, C}, bf, dev, "dx");
    gpu::fill(x, 0.5f);
    gpu::fill(g, 1.0f);
    gpu::fill(be, 0.0f);
    const double f = median_ms(dev, [&] { gpu::layernorm_forward(x, g, be, y, mean, rstd, 1e-5f); });
    print("layernorm bf16 fwd (8192 x 1600)", f, 2.0 * N * C * 2, "GB/s");
    const double b = median_ms(dev, [&] { gpu::layernorm_backward(y, x, g, mean, rstd, dx, dg, db); });
    print("layernorm bf16 bwd (8192 x 1600)", b, 3.0 * N * C * 2, "GB/s");
  }
  {
    const int64_t N = 8192, V = 50304;
    Tensor logits = Tensor::empty({N, V}, bf, dev, "logits"), dlogits = Tensor::empty({N, V}, bf, dev, "dlogits");
    Tensor targets = Tensor::zeros({N}, DType::I32, dev, "targets");
    Tensor losses = Tensor::empty({N}, DType::F32, dev, "losses"), lse = Tensor::empty({N}, DType::F32, dev, "lse");
    gpu::fill(logits, 0.3f);
    const double f = median_ms(dev, [&] { gpu::cross_entropy_forward(logits, targets, losses, lse); });
    print("cross-entropy bf16 fwd (8192 x 50304)", f, 1.0 * N * V * 2, "GB/s");
    const double b =
        median_ms(dev, [&] { gpu::cross_entropy_backward(logits, targets, lse, 1.0f / N, dlogits, 0, V); });
    print("cross-entropy bf16 bwd (8192 x 50304)", b, 2.0 * N * V * 2, "GB/s");
  }
  {
    const int64_t N = 8192, V = 50304, C = 1600;
    std::vector<int32_t> id_values = random_ids(N, 7, 0, V);
    Tensor ids = Tensor::empty({N}, DType::I32, dev, "ids");
    ids.copy_from_host(id_values.data());
    Tensor dy = Tensor::empty({N, C}, bf, dev, "dy"), dtable = Tensor::zeros({V, C}, DType::F32, dev, "dtable");
    gpu::fill(dy, 0.01f);
    const double b = median_ms(dev, [&] { gpu::embedding_backward(ids, dy, dtable, 0, V); });
    print("embedding bwd bf16 (8192 ids, 50304 x 1600)", b, 1.0 * N * C * (2 + 8), "GB/s");
  }
  {
    const int64_t n = int64_t{1558} * 1000 * 1000 / 8;  // an eighth of GPT-2 XL's parameters
    Tensor p = Tensor::zeros({n}, DType::F32, dev, "p"), g = Tensor::zeros({n}, DType::F32, dev, "g");
    Tensor m = Tensor::zeros({n}, DType::F32, dev, "m"), v = Tensor::zeros({n}, DType::F32, dev, "v");
    const double ms = median_ms(dev, [&] { gpu::adamw_step(p, g, m, v, ops::AdamWParams{}); });
    print("adamw f32 (195M parameters)", ms, 7.0 * n * 4, "GB/s");
    const double ss = median_ms(dev, [&] { gpu::sum_squares(g); });
    print("sum_squares f32 (195M) incl. sync", ss, 1.0 * n * 4, "GB/s");
  }
  {
    // The gradient norm's segments of 12 blocks of the 1.64B model (d1600): 144 segments, 369M f32 values, summed
    // one sync per segment (the loop the engine ran) and with one sync for all.
    const int64_t d = 1600;
    std::vector<Tensor> segments;
    for (int block = 0; block < 12; ++block)
      for (int64_t n : {d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d})
        segments.push_back(Tensor::zeros({n}, DType::F32, dev, "segment"));
    double bytes = 0;
    for (const Tensor& g : segments) bytes += static_cast<double>(g.nbytes());
    const double loop = median_ms(dev, [&] {
      for (const Tensor& g : segments) gpu::sum_squares(g);
    });
    print("sum_squares, 144 segments, a sync each", loop, bytes, "GB/s");
    const double total = median_ms(dev, [&] { gpu::sum_squares_total(segments); });
    print("sum_squares_total, 144 segments, one sync", total, bytes, "GB/s");
  }
  {
    // The 1.64B's LayerNorm backward with the residual gradient added, and its widest bias gradient.
    const int64_t N = 8192, C = 1600, F = 6400;
    Tensor x = Tensor::empty({N, C}, bf, dev, "x"), dy = Tensor::empty({N, C}, bf, dev, "dy");
    Tensor dres = Tensor::empty({N, C}, bf, dev, "dres"), dx = Tensor::empty({N, C}, bf, dev, "dx");
    Tensor g = Tensor::empty({C}, bf, dev, "gamma");
    Tensor mean = Tensor::zeros({N}, DType::F32, dev, "mean"), rstd = Tensor::zeros({N}, DType::F32, dev, "rstd");
    Tensor dg = Tensor::zeros({C}, DType::F32, dev, "dgamma"), db = Tensor::zeros({C}, DType::F32, dev, "dbeta");
    for (const Tensor* t : {&x, &dy, &dres, &g}) gpu::fill(*t, 0.5f);
    const double ln = median_ms(dev, [&] { gpu::layernorm_backward_add(dy, x, g, mean, rstd, dres, dx, dg, db); });
    print("layernorm_backward_add bf16 (8192 x 1600)", ln, 4.0 * N * C * 2, "GB/s");
    Tensor h = Tensor::empty({N, F}, bf, dev, "h"), dbias = Tensor::zeros({F}, DType::F32, dev, "dbias");
    gpu::fill(h, 0.01f);
    const double bb = median_ms(dev, [&] { gpu::bias_backward(h, dbias); });
    print("bias_backward bf16 (8192 x 6400)", bb, 1.0 * N * F * 2, "GB/s");
  }
  {
    // The 1.64B's out layer (6400 -> 1600, micro-batch 8): product, bias and residual as three ops, then as one;
    // its weight gradient with the bias gradient as two ops, then as one.
    const int64_t N = 8192, K = 6400, M = 1600;
    Tensor x = Tensor::empty({N, K}, bf, dev, "x"), w = Tensor::empty({M, K}, bf, dev, "w");
    Tensor bias = Tensor::empty({M}, bf, dev, "bias"), res = Tensor::empty({N, M}, bf, dev, "res");
    Tensor y = Tensor::empty({N, M}, bf, dev, "y"), dy = Tensor::empty({N, M}, bf, dev, "dy");
    Tensor dw = Tensor::zeros({M, K}, DType::F32, dev, "dw"), db = Tensor::zeros({M}, DType::F32, dev, "db");
    for (const Tensor* t : {&x, &w, &bias, &res, &dy}) gpu::fill(*t, 0.01f);
    const double flops = 2.0 * N * K * M;
    const double three = median_ms(dev, [&] {
      gpu::matmul(x, w, y, false, true, 0.0f);
      gpu::add_bias(y, bias);
      gpu::add(y, res, y);
    });
    print("matmul + add_bias + add (8192x1600x6400)", three, flops, "TFLOP/s");
    const double one = median_ms(dev, [&] { gpu::linear_forward(x, w, bias, res, y); });
    print("linear_forward, bias and residual (same)", one, flops, "TFLOP/s");
    const double two = median_ms(dev, [&] {
      gpu::matmul(dy, x, dw, true, false, 1.0f);
      gpu::bias_backward(dy, db);
    });
    print("matmul + bias_backward (dW 1600x6400, 8192)", two, flops, "TFLOP/s");
    const double fused = median_ms(dev, [&] { gpu::linear_weight_grad(dy, x, dw, db); });
    print("linear_weight_grad with dbias (same)", fused, flops, "TFLOP/s");
  }
  {
    // fc's bias and GELU on the 1.64B model's micro-batch of 8: two passes, then one.
    const int64_t N = 8192, C = 6400;
    Tensor h = Tensor::empty({N, C}, bf, dev, "h"), y = Tensor::empty({N, C}, bf, dev, "y");
    Tensor bias = Tensor::empty({C}, bf, dev, "bias"), dy = Tensor::empty({N, C}, bf, dev, "dy");
    gpu::fill(h, 0.1f);
    gpu::fill(bias, 0.01f);
    gpu::fill(dy, 0.01f);
    const double two = median_ms(dev, [&] {
      gpu::add_bias(h, bias);
      gpu::gelu_forward(h, y);
    });
    print("add_bias + gelu_forward bf16 (8192 x 6400)", two, 4.0 * N * C * 2, "GB/s");
    const double one = median_ms(dev, [&] { gpu::bias_gelu_forward(h, bias, y); });
    print("bias_gelu_forward bf16 (8192 x 6400)", one, 2.0 * N * C * 2, "GB/s");
    const double back = median_ms(dev, [&] { gpu::bias_gelu_backward(h, bias, dy, y); });
    print("bias_gelu_backward bf16 (8192 x 6400)", back, 3.0 * N * C * 2, "GB/s");
  }
  {
    // Llama 3.2 1B at a micro-batch of 4 x 2048 tokens: RMSNorm (C 2048), SwiGLU (F 8192), rotary on the fused qkv
    // (32 query heads, 8 kv heads, D 64), grouped-query attention (and at D 128).
    const int64_t N = 8192, C = 2048, F = 8192;
    Tensor x = Tensor::empty({N, C}, bf, dev, "x"), y = Tensor::empty({N, C}, bf, dev, "y");
    Tensor g = Tensor::empty({C}, bf, dev, "gamma"), rstd = Tensor::empty({N}, DType::F32, dev, "rstd");
    Tensor dg = Tensor::zeros({C}, DType::F32, dev, "dgamma"), dx = Tensor::empty({N, C}, bf, dev, "dx");
    gpu::fill(x, 0.5f);
    gpu::fill(g, 1.0f);
    const double f = median_ms(dev, [&] { gpu::rmsnorm_forward(x, g, y, rstd, 1e-5f); });
    print("rmsnorm bf16 fwd (8192 x 2048)", f, 2.0 * N * C * 2, "GB/s");
    const double b = median_ms(dev, [&] { gpu::rmsnorm_backward(y, x, g, rstd, dx, dg); });
    print("rmsnorm bf16 bwd (8192 x 2048)", b, 3.0 * N * C * 2, "GB/s");
    Tensor gu = Tensor::empty({N, 2 * F}, bf, dev, "gate_up"), h = Tensor::empty({N, F}, bf, dev, "h");
    gpu::fill(gu, 0.1f);
    const double sf = median_ms(dev, [&] { gpu::swiglu_forward(gu, h); });
    print("swiglu bf16 fwd (8192 x 2 x 8192)", sf, 3.0 * N * F * 2, "GB/s");
    const double sb = median_ms(dev, [&] { gpu::swiglu_backward(gu, h, gu); });
    print("swiglu bf16 bwd in place (8192 x 2 x 8192)", sb, 5.0 * N * F * 2, "GB/s");
  }
  for (const int64_t D : {int64_t{64}, int64_t{128}}) {
    const int64_t B = 4, T = 2048, H = 32, KV = 8, W = (H + 2 * KV) * D;
    Tensor qkv = Tensor::empty({B, T, W}, bf, dev, "qkv"), y = Tensor::empty({B, T, H * D}, bf, dev, "y");
    Tensor lse = Tensor::empty({B, H, T}, DType::F32, dev, "lse"), dy = Tensor::empty({B, T, H * D}, bf, dev, "dy");
    Tensor dqkv = Tensor::empty({B, T, W}, bf, dev, "dqkv");
    Tensor cos = Tensor::zeros({T, D / 2}, DType::F32, dev, "cos"),
           sin = Tensor::zeros({T, D / 2}, DType::F32, dev, "sin");
    gpu::fill(qkv, 0.1f);
    gpu::fill(dy, 0.01f);
    const std::string what = " (B=4 T=2048 H=32 Hkv=8 D=" + std::to_string(D) + ")";
    const double r = median_ms(dev, [&] { gpu::rotary_forward(qkv, cos, sin, static_cast<int>(H + KV), qkv); });
    print("rotary bf16 in place" + what, r, 2.0 * B * T * (H + KV) * D * 2, "GB/s");
    const double flops = 2.0 * B * T * T * H * D;  // causal: half of 4 B T^2 H D
    const double af = median_ms(dev, [&] { gpu::attention_gqa_forward(qkv, H, KV, y, lse); });
    print("attention_gqa bf16 fwd" + what, af, flops, "TFLOP/s");
    const double ab = median_ms(dev, [&] { gpu::attention_gqa_backward(qkv, H, KV, y, lse, dy, dqkv); });
    print("attention_gqa bf16 bwd" + what, ab, 2.5 * flops, "TFLOP/s");
  }
  // cuDNN's workspace at the model shapes (what the planner asks for through the scratch table).
  struct WorkspaceShape {
    const char* what;
    int64_t b, t, h, kv, d;
  };
  for (const WorkspaceShape& w : {WorkspaceShape{"gpt 1.64B (B=8 T=1024 H=25 D=64)", 8, 1024, 25, 25, 64},
                                  WorkspaceShape{"Llama 1B (B=4 T=2048 H=32 Hkv=8 D=64)", 4, 2048, 32, 8, 64},
                                  WorkspaceShape{"Llama 3B (B=2 T=2048 H=24 Hkv=8 D=128)", 2, 2048, 24, 8, 128}}) {
    Tensor qkv = Tensor::empty({w.b, w.t, (w.h + 2 * w.kv) * w.d}, bf, dev, "qkv");
    const int h = static_cast<int>(w.h), kv = static_cast<int>(w.kv);
    std::printf("cuDNN attention workspace, %s: forward %lld bytes, backward %lld bytes\n", w.what,
                static_cast<long long>(gpu::attention_gqa_cudnn_workspace_bytes(&dev, qkv, h, kv, false)),
                static_cast<long long>(gpu::attention_gqa_cudnn_workspace_bytes(&dev, qkv, h, kv, true)));
  }
}

int run(int argc, char** argv) {
  bool do_bench = true;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-bench") {
      do_bench = false;
    } else if (arg.rfind("--filter=", 0) == 0) {
      filter = arg.substr(9);
    } else if (arg == "--print-tolerances" && argc == 2) {
      for (const gpu_check::Tolerance& t : gpu_check::kTolerances) std::printf("%s %g  %s\n", t.name, t.bound, t.why);
      return 0;
    } else {
      std::fprintf(stderr, "usage: ops_check [--no-bench] [--filter=<op substring>] | ops_check --print-tolerances\n");
      return 2;
    }
  }
  CpuDevice host;
  CudaDevice dev(0);
  std::printf("ops_check on %s (%s, %d SMs), CPU reference with %d OpenMP threads\n\n", dev.name().c_str(),
              dev.gpu_name().c_str(), dev.sm_count(), omp_get_max_threads());
  std::printf("%-34s %-10s %-26s %11s %9s  %s\n", "op", "dtype", "shape", "rel error", "bound", "result");
  Suite s(host, dev, filter);
  check_matmul(s);
  check_linear(s);
  check_elementwise(s);
  check_layernorm(s);
  check_embedding(s);
  check_cross_entropy(s);
  check_reduce_and_adamw(s);
  check_deferred_errors(s);
  check_rmsnorm(s);
  check_rotary(s);
  check_swiglu(s);
  check_attention_gqa(s);
  dev.synchronize();
  const device::ArenaStats a = dev.arena_stats();
  std::printf("\narena: %s reserved in %zu block(s), %s in use, peak live %s\n", format_bytes(a.reserved_bytes).c_str(),
              a.blocks, format_bytes(a.used_bytes).c_str(), format_bytes(dev.peak_bytes()).c_str());
  std::printf("%s: %d failing row(s)\n", s.failures() ? "FAIL" : "PASS", s.failures());
  if (do_bench) bench(dev);
  return s.failures() ? 1 : 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  try {
    return tandem::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ops_check: %s\n", e.what());
    return 1;
  }
}
