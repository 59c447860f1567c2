// cpu_ops_bench: times the CPU ops of one GPT block, forward and backward, at a small-model size (defaults
// B=8, T=128, C=128, H=4), in any compute dtype. Prints the median time per pass and each op's share, so a change
// to the op library can be measured before and after.
//   cpu_ops_bench [--dtype f32|bf16|f16] [--iters N] [--B b] [--T t] [--C c] [--H h]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tandem/core/random_fill.h"
#include "tandem/device/cpu_device.h"
#include "tandem/ops/ops.h"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  DType dtype = DType::F32;
  int iters = 30;
  int64_t b = 8, t = 128, c = 128, h = 4;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--dtype") {
      o.dtype = dtype_from_name(value);
    } else if (key == "--iters") {
      o.iters = std::atoi(value.c_str());
    } else if (key == "--B") {
      o.b = std::atoll(value.c_str());
    } else if (key == "--T") {
      o.t = std::atoll(value.c_str());
    } else if (key == "--C") {
      o.c = std::atoll(value.c_str());
    } else if (key == "--H") {
      o.h = std::atoll(value.c_str());
    } else {
      TANDEM_FAIL("unknown option ", key);
    }
  }
  return o;
}

// Accumulates wall time per op name, so the report can say where a pass spends it.
class Timer {
 public:
  void run(const char* op, const std::function<void()>& fn) {
    const auto t0 = Clock::now();
    fn();
    per_op_[op] += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  const std::map<std::string, double>& per_op() const { return per_op_; }

 private:
  std::map<std::string, double> per_op_;
};

// The tensors of one block: parameters and activations in the compute dtype, gradient buffers and statistics f32.
struct Block {
  Block(Device& dev, const Options& o) : n(o.b * o.t), c(o.c) {
    const DType x = o.dtype;
    auto act = [&](const Shape& s) { return Tensor::empty(s, x, dev, "activation"); };
    auto f32 = [&](const Shape& s) { return Tensor::zeros(s, DType::F32, dev, "f32 buffer"); };
    auto param = [&](const Shape& s, uint64_t seed, float scale) {
      Tensor master = Tensor::empty(s, DType::F32, dev, "master");
      for (int64_t i = 0; i < master.numel(); ++i)
        master.f32()[i] = scale * normal_at(seed, 1, static_cast<uint64_t>(i));
      Tensor p = Tensor::empty(s, x, dev, "param");
      ops::cast(master, p);
      return p;
    };
    const float w = 0.02f;
    input = param({o.b, o.t, c}, 1, 1.0f);
    dout = param({o.b, o.t, c}, 2, 1.0f);
    g1 = param({c}, 3, 1.0f), b1 = param({c}, 4, w), g2 = param({c}, 5, 1.0f), b2 = param({c}, 6, w);
    w_qkv = param({c, 3 * c}, 7, w), bias_qkv = param({3 * c}, 8, w);
    w_o = param({c, c}, 9, w), bias_o = param({c}, 10, w);
    w_fc = param({c, 4 * c}, 11, w), bias_fc = param({4 * c}, 12, w);
    w_proj = param({4 * c, c}, 13, w), bias_proj = param({c}, 14, w);
    h1 = act({o.b, o.t, c}), qkv = act({o.b, o.t, 3 * c}), att = act({o.b, o.t, c}), o_out = act({o.b, o.t, c});
    x2 = act({o.b, o.t, c}), h2 = act({o.b, o.t, c}), f = act({o.b, o.t, 4 * c}), fg = act({o.b, o.t, 4 * c});
    p_out = act({o.b, o.t, c}), out = act({o.b, o.t, c});
    mean1 = f32({n}), rstd1 = f32({n}), mean2 = f32({n}), rstd2 = f32({n}), lse = f32({o.b, o.h, o.t});
    dfg = act({o.b, o.t, 4 * c}), df = act({o.b, o.t, 4 * c}), dh2 = act({o.b, o.t, c}), dx2 = act({o.b, o.t, c});
    datt = act({o.b, o.t, c}), dqkv = act({o.b, o.t, 3 * c}), dh1 = act({o.b, o.t, c}), dx = act({o.b, o.t, c});
    dg1 = f32({c}), db1 = f32({c}), dg2 = f32({c}), db2 = f32({c});
    dw_qkv = f32({c, 3 * c}), dbias_qkv = f32({3 * c}), dw_o = f32({c, c}), dbias_o = f32({c});
    dw_fc = f32({c, 4 * c}), dbias_fc = f32({4 * c}), dw_proj = f32({4 * c, c}), dbias_proj = f32({c});
  }

  int64_t n, c;
  Tensor input, dout, g1, b1, g2, b2, w_qkv, bias_qkv, w_o, bias_o, w_fc, bias_fc, w_proj, bias_proj;
  Tensor h1, qkv, att, o_out, x2, h2, f, fg, p_out, out, mean1, rstd1, mean2, rstd2, lse;
  Tensor dfg, df, dh2, dx2, datt, dqkv, dh1, dx, dg1, db1, dg2, db2;
  Tensor dw_qkv, dbias_qkv, dw_o, dbias_o, dw_fc, dbias_fc, dw_proj, dbias_proj;
};

// Pre-LayerNorm block: x2 = x + attn(ln1(x)); out = x2 + mlp(ln2(x2)).
void forward(Block& k, int heads, Timer& tm) {
  tm.run("layernorm_forward", [&] { ops::layernorm_forward(k.input, k.g1, k.b1, k.h1, k.mean1, k.rstd1); });
  tm.run("matmul", [&] { ops::matmul(k.h1, k.w_qkv, k.qkv, false, false); });
  tm.run("add_bias", [&] { ops::add_bias(k.qkv, k.bias_qkv); });
  tm.run("attention_forward", [&] { ops::attention_forward(k.qkv, heads, k.att, k.lse); });
  tm.run("matmul", [&] { ops::matmul(k.att, k.w_o, k.o_out, false, false); });
  tm.run("add_bias", [&] { ops::add_bias(k.o_out, k.bias_o); });
  tm.run("add", [&] { ops::add(k.input, k.o_out, k.x2); });
  tm.run("layernorm_forward", [&] { ops::layernorm_forward(k.x2, k.g2, k.b2, k.h2, k.mean2, k.rstd2); });
  tm.run("matmul", [&] { ops::matmul(k.h2, k.w_fc, k.f, false, false); });
  tm.run("add_bias", [&] { ops::add_bias(k.f, k.bias_fc); });
  tm.run("gelu_forward", [&] { ops::gelu_forward(k.f, k.fg); });
  tm.run("matmul", [&] { ops::matmul(k.fg, k.w_proj, k.p_out, false, false); });
  tm.run("add_bias", [&] { ops::add_bias(k.p_out, k.bias_proj); });
  tm.run("add", [&] { ops::add(k.x2, k.p_out, k.out); });
}

// The matching backward from dout; weight and bias gradients accumulate into f32 buffers.
void backward(Block& k, int heads, Timer& tm) {
  tm.run("bias_backward", [&] { ops::bias_backward(k.dout, k.dbias_proj); });
  tm.run("matmul", [&] { ops::matmul(k.fg, k.dout, k.dw_proj, true, false, 1.0f); });
  tm.run("matmul", [&] { ops::matmul(k.dout, k.w_proj, k.dfg, false, true); });
  tm.run("gelu_backward", [&] { ops::gelu_backward(k.f, k.dfg, k.df); });
  tm.run("bias_backward", [&] { ops::bias_backward(k.df, k.dbias_fc); });
  tm.run("matmul", [&] { ops::matmul(k.h2, k.df, k.dw_fc, true, false, 1.0f); });
  tm.run("matmul", [&] { ops::matmul(k.df, k.w_fc, k.dh2, false, true); });
  tm.run("layernorm_backward",
         [&] { ops::layernorm_backward(k.dh2, k.x2, k.g2, k.mean2, k.rstd2, k.dx2, k.dg2, k.db2); });
  tm.run("add", [&] { ops::add(k.dx2, k.dout, k.dx2); });
  tm.run("bias_backward", [&] { ops::bias_backward(k.dx2, k.dbias_o); });
  tm.run("matmul", [&] { ops::matmul(k.att, k.dx2, k.dw_o, true, false, 1.0f); });
  tm.run("matmul", [&] { ops::matmul(k.dx2, k.w_o, k.datt, false, true); });
  tm.run("attention_backward", [&] { ops::attention_backward(k.qkv, heads, k.att, k.lse, k.datt, k.dqkv); });
  tm.run("bias_backward", [&] { ops::bias_backward(k.dqkv, k.dbias_qkv); });
  tm.run("matmul", [&] { ops::matmul(k.h1, k.dqkv, k.dw_qkv, true, false, 1.0f); });
  tm.run("matmul", [&] { ops::matmul(k.dqkv, k.w_qkv, k.dh1, false, true); });
  tm.run("layernorm_backward",
         [&] { ops::layernorm_backward(k.dh1, k.input, k.g1, k.mean1, k.rstd1, k.dx, k.dg1, k.db1); });
  tm.run("add", [&] { ops::add(k.dx, k.dx2, k.dx); });
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  device::CpuDevice dev;
  Block block(dev, o);
  const int heads = static_cast<int>(o.h);
  Timer warm, tm;
  forward(block, heads, warm);  // first touch of every buffer and of the thread pools
  backward(block, heads, warm);
  std::vector<double> fwd_ms, bwd_ms;
  for (int it = 0; it < o.iters; ++it) {
    auto t0 = Clock::now();
    forward(block, heads, tm);
    auto t1 = Clock::now();
    backward(block, heads, tm);
    auto t2 = Clock::now();
    fwd_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    bwd_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  std::printf("B=%lld T=%lld C=%lld H=%lld dtype=%s threads=%d iters=%d\n", static_cast<long long>(o.b),
              static_cast<long long>(o.t), static_cast<long long>(o.c), static_cast<long long>(o.h),
              dtype_name(o.dtype).c_str(), omp_get_max_threads(), o.iters);
  std::printf("forward  median %8.3f ms\nbackward median %8.3f ms\n", median(fwd_ms), median(bwd_ms));
  std::printf("per op, mean ms per forward+backward:\n");
  for (const auto& [op, ms] : tm.per_op()) std::printf("  %-20s %8.3f\n", op.c_str(), ms / o.iters);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  try {
    return tandem::run(argc, argv);
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "cpu_ops_bench: %s\n", e.what());
    return 1;
  }
}
