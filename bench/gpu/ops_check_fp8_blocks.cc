// ops_check: the FP8 ops with several scales a tensor (rowwise, 1 x 128 and 128 x 128 blocks), CUDA against the
// CPU: amax and fp8_quantize bit for bit, into x and x^T, on rows and columns of very different magnitude (a NaN, an
// inf and a block of zeros included), with the refusal of blocks the kernels cannot take; fp8_matmul on the same FP8
// operands and scales for each pair of blocks cuBLASLt takes, and the refusal of the others; and (bench_fp8_recipes)
// the tensorwise, rowwise and blockwise recipes' casts and products timed side by side. check_fp8 and bench_fp8
// (ops_check_fp8.cc) call these.
#include <bit>

#include "ops_check_fp8.h"

namespace tandem::ops_check {

// ---- shared with ops_check_fp8.cc (ops_check_fp8.h) ----

std::pair<int64_t, std::string> diff_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                           const std::vector<float>& x, int64_t r, int64_t c, bool transposed) {
  int64_t count = 0;
  std::string first;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (count++ == 0) {
      const int64_t at =
          transposed ? static_cast<int64_t>(i) % r * c + static_cast<int64_t>(i) / r : static_cast<int64_t>(i);
      char buf[160];
      std::snprintf(buf, sizeof buf, "first at %zu: x = %.9g (bits %08x), gpu 0x%02x, cpu 0x%02x", i, x[at],
                    bits_of(x[at]), got[i], want[i]);
      first = buf;
    }
  }
  return {count, first};
}

Fp8Operand fp8_operand(Suite& s, const Shape& shape, DType format, uint64_t seed, float stddev, ops::Fp8Blocks blocks,
                       bool spread) {
  const int64_t r = shape[0], k = shape[1];
  std::vector<float> v = normals(r * k, seed, stddev);
  if (spread)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < k; ++j)
        v[i * k + j] = std::ldexp(v[i * k + j], static_cast<int>(i % 9) - 4 + static_cast<int>(j / 128 % 5) - 2);
  const auto x = s.from_values(shape, DType::F32, v);
  const int64_t count = ops::fp8_scale_grid(r, k, blocks).count;
  Tensor a = Tensor::empty({count}, DType::F32, s.host(), "amax");
  cpu::amax(x.cpu, a, blocks, false);
  Fp8Operand o{Tensor::empty(shape, format, s.host(), "q"), Tensor::empty({count}, DType::F32, s.host(), "inv_scale"),
               Tensor::empty(shape, format, s.dev(), "q"), Tensor::empty({count}, DType::F32, s.dev(), "inv_scale")};
  cpu::fp8_quantize(x.cpu, a, o.cpu_q, Tensor(), o.cpu_inv, blocks);
  o.gpu_q.copy_from(o.cpu_q);
  o.gpu_inv.copy_from(o.cpu_inv);
  return o;
}

void fill_random(const Tensor& pool, const Tensor& t, float stddev) {
  const int64_t n = t.numel(), p = pool.numel();
  for (int64_t at = 0; at < n; at += p) {
    const int64_t len = std::min(p, n - at);
    t.flat_slice(at, len, {len}).copy_from(pool.flat_slice(0, len, {len}));
  }
  gpu::scale(t, stddev);
}

// ---- amax and fp8_quantize with several scales ----

namespace {

// The block cases of the recipes: blocks of the output (x, or x^T when transposed), as the linear layer asks them.
struct BlockCase {
  const char* name;
  ops::Fp8Blocks blocks;
  bool transposed;
};
const std::vector<BlockCase> kBlockCases = {{"rowwise", {1, 0}, false},     {"rowwise x^T", {1, 0}, true},
                                            {"1x128", {1, 128}, false},     {"1x128 x^T", {1, 128}, true},
                                            {"128x128", {128, 128}, false}, {"128x128 x^T", {128, 128}, true}};

// x (R, C) as normals times 2^((7 i) % 23 - 11) for row i and 2^((5 j) % 13 - 6) for column j: rows and columns of
// very different magnitude, so that each block's amax and scale differ from its neighbours'. `special`: a NaN with
// a payload, an inf and a block of zeros (the tile at rows and columns [64, 128) where x has them).
std::vector<float> spread_values(int64_t r, int64_t c, uint64_t seed, DType t, bool special) {
  std::vector<float> v = normals(r * c, seed);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      v[i * c + j] = std::ldexp(v[i * c + j], static_cast<int>(7 * i % 23) - 11 + static_cast<int>(5 * j % 13) - 6);
  if (special) {
    v[3 * c + 5] = std::bit_cast<float>(0xffc00001u);
    v[(r - 1) * c + c - 1] = -INFINITY;
    for (int64_t i = 64; i < std::min<int64_t>(r, 128); ++i)
      for (int64_t j = 64; j < std::min<int64_t>(c, 128); ++j) v[i * c + j] = i % 2 ? -0.0f : 0.0f;
  }
  return rounded(v, t);
}

// How many of the f32 entries differ in their bits, and the first as text.
std::pair<int64_t, std::string> diff_floats(const std::vector<float>& got, const std::vector<float>& want) {
  int64_t count = 0;
  std::string first;
  for (size_t i = 0; i < want.size(); ++i) {
    if (bits_of(got[i]) == bits_of(want[i])) continue;
    if (count++ == 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "first at %zu: gpu %08x, cpu %08x (%g)", i, bits_of(got[i]), bits_of(want[i]),
                    want[i]);
      first = buf;
    }
  }
  return {count, first};
}

int64_t grid_count(int64_t r, int64_t c, const BlockCase& b) {
  return (b.transposed ? ops::fp8_scale_grid(c, r, b.blocks) : ops::fp8_scale_grid(r, c, b.blocks)).count;
}

}  // namespace

void check_amax_blocks(Suite& s) {
  // 100 x 200 takes the element-wise loads (not multiples of 16); 1040 x 400 has partial 128-blocks both ways;
  // 16400 x 1040 is large enough for a block to take 2 tiles along a row or column, the last pair partial.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{256, 512},  {272, 384}, {4096, 1024},
                                                           {1040, 400}, {100, 200}, {16400, 1040}};
  for (DType t : kFloatTypes)
    for (const BlockCase& b : kBlockCases)
      for (size_t k = 0; k <= shapes.size(); ++k) {
        const bool special = k == shapes.size();  // 272 x 384 again, with a NaN, an inf and a block of zeros
        const auto [r, c] = shapes[special ? 1 : k];
        const std::string shape = dims({r, c}) + " " + b.name + (special ? " nan/inf/0" : "");
        s.run("amax blocks", dtype_name(t), shape, [&] {
          const auto x = s.from_values({r, c}, t, spread_values(r, c, 320 + k, t, special));
          const int64_t count = grid_count(r, c, b);
          Tensor want = Tensor::empty({count}, DType::F32, s.host(), "amax"),
                 got = Tensor::empty({count}, DType::F32, s.dev(), "amax");
          s.poison(got);
          cpu::amax(x.cpu, want, b.blocks, b.transposed);
          gpu::amax(x.gpu, got, b.blocks, b.transposed);
          const auto [n, first] = diff_floats(got.to_host_floats(), want.to_host_floats());
          s.row("amax blocks bitwise", dtype_name(t), shape, static_cast<double>(n), gpu_check::kOpExact,
                std::to_string(count) + " blocks" + (first.empty() ? "" : "; " + first));
        });
      }
  // Blocks the tile kernels cannot take are refused with the op's message.
  s.run("amax blocks", "refusal", "1 x 96", [&] {
    const auto x = s.make({256, 384}, DType::BF16, 330);
    Tensor got = Tensor::empty({ops::fp8_scale_grid(256, 384, {1, 96}).count}, DType::F32, s.dev(), "amax");
    std::string message;
    try {
      gpu::amax(x.gpu, got, {1, 96}, false);
    } catch (const std::exception& e) {
      message = e.what();
    }
    const size_t at = message.find("amax: ");
    s.row("amax blocks refuses", "refusal", "1 x 96", at != std::string::npos ? 0.0 : 1.0, gpu_check::kOpExact,
          message.empty() ? "did not throw" : message.substr(at == std::string::npos ? 0 : at, 110));
  });
}

void check_quantize_blocks(Suite& s) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{272, 384}, {1040, 400}, {100, 200}};
  for (DType t : {DType::BF16, DType::F32})
    for (DType format : {DType::E4M3, DType::E5M2})
      for (const BlockCase& b : kBlockCases)
        for (size_t k = 0; k <= shapes.size(); ++k) {
          const bool special = k == shapes.size();
          const auto [r, c] = shapes[special ? 0 : k];
          const std::string tn = dtype_name(t) + ">" + fmt_name(format);
          const std::string shape =
              dims({r, c}) + " " + b.name + (b.transposed ? " q_t" : " q") + (special ? " nan/inf/0" : "");
          s.run("fp8_quantize blocks", tn, shape, [&] {
            const std::vector<float> v = spread_values(r, c, 340 + k, t, special);
            const auto x = s.from_values({r, c}, t, v);
            // Both sides quantize with the CPU's amax (amax blocks checks the GPU's).
            const int64_t count = grid_count(r, c, b);
            Tensor a_cpu = Tensor::empty({count}, DType::F32, s.host(), "amax");
            cpu::amax(x.cpu, a_cpu, b.blocks, b.transposed);
            Tensor a_gpu = Tensor::empty({count}, DType::F32, s.dev(), "amax");
            a_gpu.copy_from(a_cpu);
            const Shape out_shape = b.transposed ? Shape{c, r} : Shape{r, c};
            Tensor q_cpu = Tensor::empty(out_shape, format, s.host(), "q");
            Tensor q_gpu = Tensor::empty(out_shape, format, s.dev(), "q");
            Tensor inv_cpu = Tensor::empty({count}, DType::F32, s.host(), "inv_scale");
            Tensor inv_gpu = Tensor::empty({count}, DType::F32, s.dev(), "inv_scale");
            s.poison(q_gpu);
            s.poison(inv_gpu);
            const Tensor none;
            cpu::fp8_quantize(x.cpu, a_cpu, b.transposed ? none : q_cpu, b.transposed ? q_cpu : none, inv_cpu,
                              b.blocks);
            gpu::fp8_quantize(x.gpu, a_gpu, b.transposed ? none : q_gpu, b.transposed ? q_gpu : none, inv_gpu,
                              b.blocks);
            const auto [n, first] = diff_bytes(bytes_of(q_gpu), bytes_of(q_cpu), v, r, c, b.transposed);
            s.row(b.transposed ? "fp8_quantize blocks q_t bitwise" : "fp8_quantize blocks q bitwise", tn, shape,
                  static_cast<double>(n), gpu_check::kOpExact, first);
            const auto [ni, first_inv] = diff_floats(inv_gpu.to_host_floats(), inv_cpu.to_host_floats());
            s.row("fp8_quantize blocks inv_scale bitwise", tn, shape, static_cast<double>(ni), gpu_check::kOpExact,
                  std::to_string(count) + " blocks" + (first_inv.empty() ? "" : "; " + first_inv));
          });
        }
}

// ---- fp8_matmul with several scales ----

// fp8_matmul with scales of several blocks: each of Hopper's pairs (rowwise; 1 x 128 with 128 x 128 and the other
// way round; 1 x 128 with 1 x 128, the weight gradient's) against the CPU on the same FP8 operands and scales, whose
// rows and 128-column blocks differ in magnitude (fp8_operand's spread); K not a multiple of 128, K <= 128 (where a
// 1 x 128 grid is one scale per row) and M not a multiple of 16 (or of 4, but for 1 x 128 scales) included.
void check_fp8_matmul_blocks(Suite& s) {
  struct Case {
    int64_t m, n, k;
    DType fa, fb, d;
    ops::Fp8Blocks ab, bb;
    bool bias, c, accumulate, fast;
  };
  const DType e4 = DType::E4M3, e5 = DType::E5M2, bf = DType::BF16, f32 = DType::F32;
  const ops::Fp8Blocks row{1, 0}, vec{1, 128}, blk{128, 128};
  const std::vector<Case> cases = {
      {256, 384, 1024, e4, e4, bf, row, row, true, false, false, true},    // forward, rowwise
      {250, 400, 400, e5, e4, bf, row, row, false, false, false, false},   // dx, rowwise
      {512, 384, 1024, e5, e4, f32, row, row, false, true, true, false},   // dW, rowwise, into f32
      {256, 384, 1024, e4, e4, bf, vec, blk, true, true, false, true},     // forward with a residual
      {256, 384, 1024, e4, e4, bf, vec, blk, false, false, false, false},  // the same without fast accumulation
      {252, 400, 400, e5, e4, bf, vec, blk, false, false, false, false},   // dx, K % 128 != 0, M % 16 != 0
      {250, 400, 400, e5, e4, bf, blk, vec, false, false, false, false},   // M % 4 != 0 in 128 x 128 blocks
      {2048, 1024, 4096, e4, e4, bf, vec, blk, true, false, false, true},  // forward at size
      {384, 272, 1040, e4, e4, bf, blk, vec, false, false, false, false},  // 128 x 128 with 1 x 128
      {300, 256, 640, e4, e5, f32, blk, vec, false, true, false, false},   // the same into f32 with c
      {512, 384, 2048, e5, e4, f32, vec, vec, false, true, true, false},   // dW += dy^T x into f32
      {256, 400, 1040, e5, e4, f32, vec, vec, false, true, true, false},   // dW, K % 128 != 0
      {1024, 512, 8192, e5, e4, f32, vec, vec, false, true, true, false},  // dW over 8192 tokens
      {256, 384, 1024, e4, e4, bf, vec, vec, false, false, false, false},  // 1 x 128 both, bf16 out
      {128, 64, 96, e4, e4, bf, vec, blk, true, false, false, true},       // K <= 128
      {128, 64, 96, e5, e4, f32, vec, vec, false, true, true, false},      // K <= 128, both one per row
  };
  const auto name = [](ops::Fp8Blocks b) {
    return b.rows == 1 && b.cols == 0 ? std::string("row") : std::to_string(b.rows) + "x" + std::to_string(b.cols);
  };
  for (const Case& c : cases) {
    const std::string tn = std::string(fmt_name(c.fa)) + "x" + fmt_name(c.fb) + ">" + dtype_name(c.d);
    const std::string shape = dims({c.m, c.n, c.k}) + " " + name(c.ab) + "/" + name(c.bb) + (c.bias ? " bias" : "") +
                              (c.accumulate ? " c=d"
                               : c.c        ? " c"
                                            : "") +
                              (c.fast ? " fast" : "");
    s.run("fp8_matmul blocks", tn, shape, [&] {
      const Fp8Operand a = fp8_operand(s, {c.m, c.k}, c.fa, 410, 1.0f, c.ab, true);
      const Fp8Operand b = fp8_operand(s, {c.n, c.k}, c.fb, 411, 0.05f, c.bb, true);
      const float size = 0.05f * std::sqrt(static_cast<float>(c.k));
      const Tensor none;
      auto bias = s.make({c.n}, c.d, 412, size);
      auto cin = s.make({c.m, c.n}, c.d, 413, size);
      auto d = c.accumulate ? s.make({c.m, c.n}, c.d, 414, size) : s.output({c.m, c.n}, c.d);
      const Tensor bias_cpu = host_copy(s, bias.gpu), cin_cpu = host_copy(s, cin.gpu), d_cpu = host_copy(s, d.gpu);
      const Tensor& c_cpu = c.accumulate ? d_cpu : c.c ? cin_cpu : none;
      const Tensor& c_gpu = c.accumulate ? d.gpu : c.c ? cin.gpu : none;
      cpu::fp8_matmul(a.cpu_q, a.cpu_inv, b.cpu_q, b.cpu_inv, c.bias ? bias_cpu : none, c_cpu, d_cpu, c.fast, c.ab,
                      c.bb);
      gpu::fp8_matmul(a.gpu_q, a.gpu_inv, b.gpu_q, b.gpu_inv, c.bias ? bias.gpu : none, c_gpu, d.gpu, c.fast, c.ab,
                      c.bb);
      s.row("fp8_matmul blocks", tn, shape, rel_error(d.gpu.to_host_floats(), d_cpu.to_host_floats()),
            c.fast ? gpu_check::kOpFp8MatmulFastAccum : gpu_check::kOpFp8Matmul);
    });
  }
  // Pairs of blocks no cuBLASLt mode takes are refused with the op's message.
  struct Refusal {
    const char* what;
    int64_t m;
    ops::Fp8Blocks ab, bb;
  };
  for (const Refusal& r :
       {Refusal{"rowwise with 128x128", 256, row, blk}, Refusal{"tensorwise with 1x128", 256, kOneScale, vec},
        Refusal{"1x64 with 128x128", 256, {1, 64}, blk}, Refusal{"1x128 of M % 4 != 0", 250, vec, blk}}) {
    s.run("fp8_matmul blocks", "refusal", r.what, [&] {
      const Fp8Operand a = fp8_operand(s, {r.m, 512}, e4, 415, 1.0f, r.ab);
      const Fp8Operand b = fp8_operand(s, {128, 512}, e4, 416, 1.0f, r.bb);
      auto d = s.output({r.m, 128}, bf);
      std::string message;
      try {
        gpu::fp8_matmul(a.gpu_q, a.gpu_inv, b.gpu_q, b.gpu_inv, Tensor(), Tensor(), d.gpu, false, r.ab, r.bb);
      } catch (const std::exception& e) {
        message = e.what();
      }
      const size_t at = message.find("fp8_matmul: ");
      s.row("fp8_matmul blocks refuses", "refusal", r.what, at != std::string::npos ? 0.0 : 1.0, gpu_check::kOpExact,
            message.empty() ? "did not throw" : message.substr(at == std::string::npos ? 0 : at, 110));
    });
  }
}

// ---- timings ----

namespace {

// One FP8 operand of a recipe: x (R, C) or x^T in `blocks`, from the ops under test: amax, q and the inverse scales.
struct Scaled {
  Tensor amax, q, inv;
};
Scaled quantize_blocks(CudaDevice& dev, const Tensor& x, DType format, ops::Fp8Blocks blocks, bool transposed) {
  const int64_t r = x.dim(0), c = x.dim(1), rows = transposed ? c : r, k = transposed ? r : c;
  const int64_t count = ops::fp8_scale_grid(rows, k, blocks).count;
  Scaled out{Tensor::empty({count}, DType::F32, dev, "amax"), Tensor::empty({rows, k}, format, dev, "q"),
             Tensor::empty({count}, DType::F32, dev, "inv_scale")};
  const Tensor none;
  gpu::amax(x, out.amax, blocks, transposed);
  gpu::fp8_quantize(x, out.amax, transposed ? none : out.q, transposed ? out.q : none, out.inv, blocks);
  return out;
}

}  // namespace

// The three recipes side by side at M = 16384 tokens and K = 4096 inputs (Llama-3-8B's o projection and its gate's
// 14336 outputs): tensorwise (one scale a tensor), rowwise (one per row of each operand, along K) and blockwise (1 x
// 128 for activations and gradients, 128 x 128 for weights): the casts of x (amax and quantize, into x and x^T) and
// the layer's three products, each against tensorwise's. The forward asks for fast accumulation, which the block
// scales' kernels may run without.
void bench_fp8_recipes(CudaDevice& dev, const Tensor& pool) {
  struct Recipe {
    const char* name;
    ops::Fp8Blocks act, weight;
  };
  const Recipe recipes[] = {{"tensorwise", {}, {}}, {"rowwise", {1, 0}, {1, 0}}, {"blockwise", {1, 128}, {128, 128}}};
  const DType bf = DType::BF16, e4 = DType::E4M3, e5 = DType::E5M2;
  const int64_t n = 16384, in = 4096;
  std::printf("\n%-58s %10s %14s %10s\n", "FP8 recipes, M = 16384, K = 4096 (median of 20)", "ms", "rate", "vs tensor");
  const auto print = [](const std::string& what, double ms, double amount, bool flops, double base_ms) {
    const double rate = amount / (ms * 1e-3) / (flops ? 1e12 : 1e9);
    std::printf("%-58s %10.3f %10.1f %s %9.2fx\n", what.c_str(), ms, rate, flops ? "TFLOP/s" : "GB/s   ", base_ms / ms);
    std::fflush(stdout);
  };
  Tensor x = Tensor::empty({n, in}, bf, dev, "x");
  fill_random(pool, x, 1.0f);
  // The casts of x, bf16, into x or x^T: amax reads x (2 bytes an element), fp8_quantize reads it and writes a byte.
  const double elems = static_cast<double>(x.numel());
  for (const bool transposed : {false, true}) {
    double base[2] = {};
    for (const Recipe& rc : recipes) {
      const Scaled q = quantize_blocks(dev, x, e4, rc.act, transposed);
      const Tensor none;
      const double ms[2] = {median_ms(dev, [&] { gpu::amax(x, q.amax, rc.act, transposed); }), median_ms(dev, [&] {
                              gpu::fp8_quantize(x, q.amax, transposed ? none : q.q, transposed ? q.q : none, q.inv,
                                                rc.act);
                            })};
      for (int i = 0; i < 2; ++i) {
        if (base[i] == 0) base[i] = ms[i];
        print(std::string(i == 0 ? "amax         " : "fp8_quantize ") + (transposed ? "x^T " : "x   ") + rc.name + " " +
                  dims({n, in}),
              ms[i], (i == 0 ? 2 : 3) * elems, false, base[i]);
      }
    }
  }
  const Tensor none;
  for (const int64_t out : {int64_t{4096}, int64_t{14336}}) {
    Tensor w = Tensor::empty({out, in}, bf, dev, "w"), dy = Tensor::empty({n, out}, bf, dev, "dy");
    fill_random(pool, w, 0.02f);
    fill_random(pool, dy, 1e-4f);
    Tensor y = Tensor::empty({n, out}, bf, dev, "y"), dx = Tensor::empty({n, in}, bf, dev, "dx");
    Tensor dw = Tensor::zeros({out, in}, DType::F32, dev, "dW");
    const double flops = 2.0 * n * in * out;
    const std::string at = " " + std::to_string(n) + "x" + std::to_string(out) + "x" + std::to_string(in);
    double base[3] = {};
    for (const Recipe& rc : recipes) {
      const Scaled xq = quantize_blocks(dev, x, e4, rc.act, false), wq = quantize_blocks(dev, w, e4, rc.weight, false);
      const Scaled dyq = quantize_blocks(dev, dy, e5, rc.act, false);
      const Scaled wtq = quantize_blocks(dev, w, e4, rc.weight, true);
      const Scaled dytq = quantize_blocks(dev, dy, e5, rc.act, true), xtq = quantize_blocks(dev, x, e4, rc.act, true);
      const double ms[3] = {
          median_ms(dev, [&] { gpu::fp8_matmul(xq.q, xq.inv, wq.q, wq.inv, none, none, y, true, rc.act, rc.weight); }),
          median_ms(dev,
                    [&] { gpu::fp8_matmul(dyq.q, dyq.inv, wtq.q, wtq.inv, none, none, dx, false, rc.act, rc.weight); }),
          median_ms(dev,
                    [&] { gpu::fp8_matmul(dytq.q, dytq.inv, xtq.q, xtq.inv, none, dw, dw, false, rc.act, rc.act); })};
      const char* what[3] = {"fwd  y = x W^T (fast accum) ", "bwd  dx = dy W ", "bwd  dW += dy^T x (f32) "};
      for (int i = 0; i < 3; ++i) {
        if (base[i] == 0) base[i] = ms[i];
        print(std::string(what[i]) + rc.name + at, ms[i], flops, true, base[i]);
      }
    }
  }
}

}  // namespace tandem::ops_check
