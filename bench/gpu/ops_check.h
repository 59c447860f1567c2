// ops_check's harness (ops_check.cc says what the program does): inputs drawn from Philox and rounded to the dtype
// under test, the relative error against the CPU op, and the Suite that prints one row per check and counts failures.
#pragma once

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
#include "tandem/core/random_fill.h"
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

namespace tandem::ops_check {

namespace cpu = ops::cpu;
namespace gpu = ops::cuda;
using device::CpuDevice;
using device::CudaDevice;

inline const std::vector<DType> kFloatTypes = {DType::F32, DType::BF16, DType::F16};

inline double bound_for(DType t) {
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

inline std::vector<char> encode(const std::vector<float>& v, DType t) {
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
inline std::vector<float> rounded(std::vector<float> v, DType t) {
  if (t == DType::F32) return v;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i)
    v[i] = t == DType::BF16 ? bf16_to_f32(f32_to_bf16(v[i])) : f16_to_f32(f32_to_f16(v[i]));
  return v;
}

inline std::vector<float> normals(int64_t n, uint64_t seed, float stddev = 1.0f, float mean = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) v[i] = mean + stddev * normal_at(seed, 0x0c4ec, static_cast<uint64_t>(i));
  return v;
}

inline std::vector<int32_t> random_ids(int64_t n, uint64_t seed, int64_t lo, int64_t hi) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<int32_t>(lo + static_cast<int64_t>(bits64_at(seed, 0x1d5, i) % static_cast<uint64_t>(hi - lo)));
  return v;
}

inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
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
inline bool same_bits(const Tensor& a, const Tensor& b) {
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

inline std::string dims(std::initializer_list<int64_t> d) { return shape_str(Shape(d)); }

// The median of `reps` timed runs of f on the device's compute stream, in ms, after `warmup` untimed ones.
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

// The checks, one function per op family, each printing its rows into the suite: ops_check_dense.cc,
// ops_check_embed_loss.cc (GPT-family ops), ops_check_llama.cc and ops_check_fp8.cc.
void check_matmul(Suite& s);
void check_linear(Suite& s);
void check_elementwise(Suite& s);
void check_layernorm(Suite& s);
void check_embedding(Suite& s);
void check_cross_entropy(Suite& s);
void check_reduce_and_adamw(Suite& s);
void check_deferred_errors(Suite& s);
void check_rmsnorm(Suite& s);
void check_head_norm(Suite& s);
void check_rotary(Suite& s);
void check_swiglu(Suite& s);
void check_attention_gqa(Suite& s);
void check_attention_pair(Suite& s);
void check_fp8(Suite& s);
void check_moe(Suite& s);
void check_moe_grouped(Suite& s);  // called by check_moe

// Timings of the main ops and the cuDNN attention workspaces (ops_check_bench.cc), and of the FP8 linear layer
// against bf16 (ops_check_fp8.cc), and of attention at 2k to 128k tokens (ops_check_long_attention.cc).
void bench(CudaDevice& dev);
void bench_fp8(CudaDevice& dev);
void bench_long_attention(CudaDevice& dev);
// The experts' grouped products on both CUDA paths at the Qwen3-30B-A3B shapes (ops_check_moe_grouped.cc).
void bench_moe(CudaDevice& dev);

}  // namespace tandem::ops_check
