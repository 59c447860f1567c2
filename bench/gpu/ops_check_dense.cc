// ops_check: matmul, the linear layer, the elementwise ops and LayerNorm, CUDA against the CPU.
#include <chrono>
#include <tuple>

#include "ops_check.h"

namespace tandem::ops_check {

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
    // copy_columns: a block of columns between row-major tensors of other widths (context parallelism's all-to-all
    // packing: q | k | v slices of 4096-wide qkv rows into 1024-wide ones); a plain copy, so exact.
    for (const auto& [n, ws, wd, from, to, w] :
         std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>>{
             {7, 13, 5, 3, 1, 4}, {4096, 6144, 1536, 1024, 256, 1024}}) {
      const std::string shape = dims({n, ws}) + " -> " + dims({n, wd});
      s.run("copy_columns", tn, shape, [&] {
        auto src = s.make({n, ws}, t, 18);
        auto dst = s.make({n, wd}, t, 19);
        cpu::copy_columns(src.cpu, from, dst.cpu, to, w);
        gpu::copy_columns(src.gpu, from, dst.gpu, to, w);
        s.row("copy_columns", tn, shape, same_bits(dst.gpu, dst.cpu) ? 0.0 : 1.0, gpu_check::kOpExact);
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
  // Initial values: the GPU draws the host's bits (core/random_fill.h), for a part of a fused, unequally blocked
  // tensor (a grouped-query qkv's q, k and v rows) from its 1000th element on; the rate of the GPU's draws beside it.
  for (const RandomKind kind : {RandomKind::Normal, RandomKind::Uniform}) {
    const char* kind_name = kind == RandomKind::Normal ? "normal" : "uniform";
    const int64_t in = 4096, n = (4096 + 1024 + 1024) / 2 * in - 1000;
    s.run("random_fill", kind_name, dims({n}), [&] {
      RandomFill f;
      f.kind = kind;
      f.scale = 0.02f;
      f.seed = 7;
      f.stream = hash_name("blocks.3.qkv.weight");
      f.first = 1000;
      f.shard = ShardIndex{1, 4096 + 1024 + 1024, in, 1, 2, 3, {4096, 1024, 1024, 0}};
      auto y = s.output({n}, DType::F32);
      random_fill_host(y.cpu.f32(), n, f);
      gpu::random_fill(y.gpu, f);  // once to load the kernel, then timed
      s.dev().synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      gpu::random_fill(y.gpu, f);
      s.dev().synchronize();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const std::vector<float> g = y.gpu.to_host_floats();
      const float* w = y.cpu.f32();
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&g[static_cast<size_t>(i)], &w[i], 4) != 0;
      s.row("random_fill", kind_name, dims({n}), static_cast<double>(differ), 0.0,
            "elements whose bits differ from the host's; " + std::to_string(ms) + " ms on the GPU (" +
                std::to_string(n / ms / 1e6) + " G elements/s)");
    });
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

}  // namespace tandem::ops_check
