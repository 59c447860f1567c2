// ops_check: the FP8 ops (ops.h, "FP8"), CUDA against the CPU, with one scale a tensor: amax and fp8_quantize bit
// for bit (on values at and beside every rounding boundary of e4m3 and e5m2, subnormals, saturation, zeros, NaN),
// fp8_matmul on the same FP8 operands; then the FP8 linear layer's numerics against bf16 at Llama-3-8B's projection
// shapes, as SQNR against an fp32 reference; and (bench_fp8) its timings against bf16. ops_check_fp8_blocks.cc has
// the same ops with several scales and the recipes' timings, which check_fp8 and bench_fp8 call in turn.
// `ops_check --family fp8` runs these alone.
#include "ops_check_fp8.h"

#include <bit>
#include <cinttypes>
#include <limits>

namespace tandem::ops_check {

namespace {

int max_exp_of(DType format) { return format == DType::E4M3 ? ops::kE4M3MaxExp : ops::kE5M2MaxExp; }

Tensor scalar(Device& dev, float v) {
  Tensor t = Tensor::empty({1}, DType::F32, dev, "scalar");
  t.copy_from_host(&v);
  return t;
}

// Every finite non-negative value of the format, ascending (their codes 0x00..0x7e for e4m3, 0x00..0x7b for e5m2).
std::vector<float> fp8_grid(DType format) {
  std::vector<float> g;
  const int last = format == DType::E4M3 ? 0x7e : 0x7b;
  for (int b = 0; b <= last; ++b)
    g.push_back(format == DType::E4M3 ? e4m3_to_f32(static_cast<uint8_t>(b)) : e5m2_to_f32(static_cast<uint8_t>(b)));
  return g;
}

// The neighbour of a non-negative v (representable in t) one step of t up or down; v itself at the ends.
float step_in(float v, DType t, bool up) {
  if (!up && v == 0.0f) return v;
  if (t == DType::F32) return std::nextafter(v, up ? INFINITY : 0.0f);
  const uint16_t h = t == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
  const uint16_t n = static_cast<uint16_t>(up ? h + 1 : h - 1);
  const float out = t == DType::BF16 ? bf16_to_f32(n) : f16_to_f32(n);
  return std::isfinite(out) ? out : v;
}

// Inputs of dtype t that, scaled by 2^e, land on every value of the format's grid, on every midpoint between two
// neighbours (a tie: round to even), and one step of t either side of each midpoint; past the largest value (ties
// and beyond: saturation), huge values and inf; zeros; each with its negative.
std::vector<float> boundary_values(DType format, DType t, int e) {
  const std::vector<float> grid = fp8_grid(format);
  std::vector<float> pos;
  auto add = [&](float scaled) {  // a value in the scaled domain; exact in t by construction
    const float v = rounded({std::ldexp(scaled, -e)}, t)[0];
    pos.push_back(v);
    pos.push_back(step_in(v, t, true));
    pos.push_back(step_in(v, t, false));
  };
  for (size_t i = 0; i < grid.size(); ++i) {
    add(grid[i]);
    if (i + 1 < grid.size()) add((grid[i] + grid[i + 1]) / 2);
  }
  const float top = grid.back(), below = grid[grid.size() - 2];
  for (float past : {top + (top - below) / 2, top * 1.25f, top * 2, top * 1000, 1e30f}) add(past);
  pos.push_back(INFINITY);
  pos.push_back(0.0f);
  std::vector<float> all = pos;
  for (float v : pos) all.push_back(-v);
  return rounded(all, t);
}

// ---- amax ----

void check_amax(Suite& s) {
  struct Case {
    int64_t n;
    const char* what;  // "", "tail max", "inf", "nan", "nan tail", "zeros", "unaligned"
  };
  const std::vector<Case> cases = {{1, ""},
                                   {7, "tail max"},
                                   {1000, ""},
                                   {4099, "inf"},
                                   {4099, "nan"},
                                   {4099, "nan tail"},
                                   {(1 << 20) + 5, "tail max"},
                                   {(1 << 20) + 5, "nan"},
                                   {333, "zeros"},
                                   {5000, "unaligned"}};
  for (DType t : kFloatTypes) {
    for (const Case& c : cases) {
      const std::string what = c.what, shape = dims({c.n}) + (what.empty() ? "" : " " + what);
      s.run("amax (fp8 scale)", dtype_name(t), shape, [&] {
        std::vector<float> v = normals(c.n, 300 + c.n, 3.0f);
        if (what == "tail max") v.back() = -1e4f;
        if (what == "inf") v[c.n / 3] = -INFINITY;
        if (what == "nan") v[c.n / 2] = std::bit_cast<float>(0xffc00001u);  // a negative NaN with a payload
        if (what == "nan tail") v.back() = std::numeric_limits<float>::quiet_NaN();
        if (what == "zeros")
          for (size_t i = 0; i < v.size(); ++i) v[i] = i % 2 ? -0.0f : 0.0f;
        v = rounded(v, t);
        // "unaligned": x starts one element into its allocation, off the 16-byte grid.
        const int64_t off = what == "unaligned" ? 1 : 0;
        std::vector<float> padded(off, 0.0f);
        padded.insert(padded.end(), v.begin(), v.end());
        auto x = s.from_values({c.n + off}, t, padded);
        const Tensor x_cpu = x.cpu.flat_slice(off, c.n, {c.n}), x_gpu = x.gpu.flat_slice(off, c.n, {c.n});
        Tensor want = Tensor::empty({1}, DType::F32, s.host(), "amax"),
               got = Tensor::empty({1}, DType::F32, s.dev(), "amax");
        s.poison(got);
        cpu::amax(x_cpu, want, kOneScale, false);
        gpu::amax(x_gpu, got, kOneScale, false);
        const float g = got.to_host_floats()[0], w = want.f32()[0];
        char note[96];
        std::snprintf(note, sizeof note, "gpu %08x, cpu %08x", bits_of(g), bits_of(w));
        s.row("amax (fp8 scale) bitwise", dtype_name(t), shape, bits_of(g) == bits_of(w) ? 0.0 : 1.0,
              gpu_check::kOpExact, note);
      });
    }
  }
}

// ---- fp8_quantize ----

// Quantizes x (values `v`, CPU f32 and GPU dtype t) on both sides and compares q, q_t and inv_scale bit for bit.
// `amax`: the value given to both (NaN: each side computes it with its amax op). `offset`: x, q and q_t start that
// many elements into their allocations (1, 3, 5), off the 16-byte grid.
void quantize_case(Suite& s, DType t, DType format, int64_t r, int64_t c, const std::vector<float>& v, float amax,
                   bool want_q, bool want_t, bool offset, const std::string& label) {
  const int64_t n = r * c;
  const std::string tn = dtype_name(t) + ">" + fmt_name(format);
  const std::string shape =
      dims({r, c}) + " " + label + (want_q ? " q" : "") + (want_t ? " q_t" : "") + (offset ? " unaligned" : "");
  s.run("fp8_quantize", tn, shape, [&] {
    const int64_t ox = offset ? 1 : 0, oq = offset ? 3 : 0, ot = offset ? 5 : 0;
    std::vector<float> padded(ox, 0.0f);
    padded.insert(padded.end(), v.begin(), v.end());
    auto xs = s.from_values({n + ox}, t, padded);
    const Tensor x_cpu = xs.cpu.flat_slice(ox, n, {r, c}), x_gpu = xs.gpu.flat_slice(ox, n, {r, c});
    Tensor a_cpu = scalar(s.host(), amax), a_gpu = scalar(s.dev(), amax);
    if (std::isnan(amax)) {
      cpu::amax(x_cpu, a_cpu, kOneScale, false);
      gpu::amax(x_gpu, a_gpu, kOneScale, false);
    }
    const Tensor none;
    Tensor q_cpu = want_q ? Tensor::empty({r, c}, format, s.host(), "q") : none;
    Tensor qt_cpu = want_t ? Tensor::empty({c, r}, format, s.host(), "q_t") : none;
    Tensor q_all = Tensor::empty({n + oq}, format, s.dev(), "q"),
           qt_all = Tensor::empty({n + ot}, format, s.dev(), "q_t");
    s.poison(q_all);
    s.poison(qt_all);
    Tensor q_gpu = want_q ? q_all.flat_slice(oq, n, {r, c}) : none;
    Tensor qt_gpu = want_t ? qt_all.flat_slice(ot, n, {c, r}) : none;
    Tensor inv_cpu = Tensor::empty({1}, DType::F32, s.host(), "inv_scale");
    Tensor inv_gpu = Tensor::empty({1}, DType::F32, s.dev(), "inv_scale");
    s.poison(inv_gpu);
    cpu::fp8_quantize(x_cpu, a_cpu, q_cpu, qt_cpu, inv_cpu, kOneScale);
    gpu::fp8_quantize(x_gpu, a_gpu, q_gpu, qt_gpu, inv_gpu, kOneScale);
    const std::vector<float> xv = x_cpu.to_host_floats();
    if (want_q) {
      const auto [count, first] = diff_bytes(bytes_of(q_gpu), bytes_of(q_cpu), xv, r, c, false);
      s.row("fp8_quantize q bitwise", tn, shape, static_cast<double>(count), gpu_check::kOpExact, first);
    }
    if (want_t) {
      const auto [count, first] = diff_bytes(bytes_of(qt_gpu), bytes_of(qt_cpu), xv, r, c, true);
      s.row("fp8_quantize q_t bitwise", tn, shape, static_cast<double>(count), gpu_check::kOpExact, first);
    }
    const float g = inv_gpu.to_host_floats()[0], w = inv_cpu.f32()[0];
    char note[96];
    std::snprintf(note, sizeof note, "gpu %08x, cpu %08x (%g)", bits_of(g), bits_of(w), w);
    s.row("fp8_quantize inv_scale bitwise", tn, shape, bits_of(g) == bits_of(w) ? 0.0 : 1.0, gpu_check::kOpExact, note);
  });
}

void check_quantize(Suite& s) {
  // (dtype, format, amax): the scale 2^e with e = 4 and -5 (e4m3), 12 and -5 (e5m2), 0 for f16's e5m2 (so its
  // subnormals are f16 values), and 126, clamped, from a subnormal amax (the inputs then f32 / bf16 subnormals).
  struct Scale {
    DType t, format;
    float amax;
  };
  const float tiny = std::ldexp(1.0f, -130);
  const std::vector<Scale> scales = {{DType::F32, DType::E4M3, 28.0f},  {DType::F32, DType::E4M3, tiny},
                                     {DType::F32, DType::E5M2, 14.0f},  {DType::F32, DType::E5M2, 57344.0f * 32},
                                     {DType::BF16, DType::E4M3, 28.0f}, {DType::BF16, DType::E4M3, 14336.0f},
                                     {DType::BF16, DType::E4M3, tiny},  {DType::BF16, DType::E5M2, 14.0f},
                                     {DType::F16, DType::E4M3, 28.0f},  {DType::F16, DType::E5M2, 57344.0f}};
  // Shapes: 37 x 53 and 130 x 200 take the element-wise kernels (not multiples of 16), 96 x 80 and 1000 x 1008 the
  // 16-byte ones with partial 64 x 64 tiles.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{37, 53}, {96, 80}, {130, 200}, {1000, 1008}};
  for (const Scale& sc : scales) {
    bool finite = true;
    const int e = ops::fp8_scale_exponent(sc.amax, max_exp_of(sc.format), &finite);
    const std::vector<float> values = boundary_values(sc.format, sc.t, e);
    const std::string label = "e=" + std::to_string(e);
    for (size_t k = 0; k < shapes.size(); ++k) {
      const auto [r, c] = shapes[k];
      std::vector<float> v(static_cast<size_t>(r * c));
      for (size_t i = 0; i < v.size(); ++i) v[i] = values[(i + k * 13) % values.size()];
      quantize_case(s, sc.t, sc.format, r, c, v, sc.amax, true, false, false, label);
      quantize_case(s, sc.t, sc.format, r, c, v, sc.amax, true, true, false, label);
      quantize_case(s, sc.t, sc.format, r, c, v, sc.amax, false, true, false, label);
      if (k == 0) quantize_case(s, sc.t, sc.format, r, c, v, sc.amax, true, true, true, label);
    }
  }
  // The usual flow, amax from the amax op on each side: random normals; and the same with NaNs (inv_scale NaN, the
  // scale 1, NaN to 0x7f).
  for (DType t : kFloatTypes)
    for (DType format : {DType::E4M3, DType::E5M2})
      for (bool nan : {false, true}) {
        const int64_t r = 192, c = 336;
        std::vector<float> v = rounded(normals(r * c, 310, 2.0f), t);
        if (nan) {
          v[5] = std::numeric_limits<float>::quiet_NaN();
          v[r * c - 1] = -std::numeric_limits<float>::quiet_NaN();
        }
        const std::string label = nan ? "amax op, NaN" : "amax op";
        quantize_case(s, t, format, r, c, v, NAN, true, true, false, label);
        quantize_case(s, t, format, r, c, v, NAN, true, false, false, label);
      }
}

// ---- fp8_matmul ----

void check_fp8_matmul(Suite& s) {
  struct Case {
    int64_t m, n, k;
    DType fa, fb, d;
    bool bias, c, accumulate, fast;  // accumulate: c is d (a weight gradient into f32)
  };
  const DType e4 = DType::E4M3, e5 = DType::E5M2, bf = DType::BF16;
  const std::vector<Case> cases = {
      {37, 48, 64, e4, e4, bf, true, false, false, false},
      {128, 96, 272, e4, e5, bf, false, true, false, false},
      {200, 160, 528, e5, e4, bf, true, true, false, false},
      {96, 64, 1040, e4, e4, DType::F16, true, true, false, false},
      {64, 48, 320, e4, e5, DType::F32, false, false, false, false},
      {64, 48, 320, e4, e4, DType::F32, true, true, false, false},  // an f32 d's bias: added after the product
      {300, 272, 1024, e5, e4, DType::F32, false, true, true, false},
      {1024, 512, 8192, e5, e4, DType::F32, false, true, true, false},  // dW = dy^T x over 8192 tokens
      {2048, 1024, 4096, e4, e4, bf, true, false, false, false},
      {2048, 1024, 4096, e4, e4, bf, true, false, false, true},
      {1024, 512, 8192, e5, e4, DType::F32, false, true, true, true},
  };
  for (const Case& c : cases) {
    const std::string tn = std::string(fmt_name(c.fa)) + "x" + fmt_name(c.fb) + ">" + dtype_name(c.d);
    const std::string shape = dims({c.m, c.n, c.k}) + (c.bias ? " bias" : "") +
                              (c.accumulate ? " c=d"
                               : c.c        ? " c"
                                            : "") +
                              (c.fast ? " fast" : "");
    s.run("fp8_matmul", tn, shape, [&] {
      const Fp8Operand a = fp8_operand(s, {c.m, c.k}, c.fa, 400, 1.0f);
      const Fp8Operand b = fp8_operand(s, {c.n, c.k}, c.fb, 401, 0.05f);
      // The bias and c as large as the product (sqrt(K) * 0.05), so that losing either shows.
      const float size = 0.05f * std::sqrt(static_cast<float>(c.k));
      const Tensor none;
      auto bias = s.make({c.n}, c.d, 402, size);
      auto cin = s.make({c.m, c.n}, c.d, 403, size);
      auto d = c.accumulate ? s.make({c.m, c.n}, c.d, 404, size) : s.output({c.m, c.n}, c.d);
      const Tensor bias_cpu = host_copy(s, bias.gpu), cin_cpu = host_copy(s, cin.gpu), d_cpu = host_copy(s, d.gpu);
      const Tensor& c_cpu = c.accumulate ? d_cpu : c.c ? cin_cpu : none;
      const Tensor& c_gpu = c.accumulate ? d.gpu : c.c ? cin.gpu : none;
      cpu::fp8_matmul(a.cpu_q, a.cpu_inv, b.cpu_q, b.cpu_inv, c.bias ? bias_cpu : none, c_cpu, d_cpu, c.fast, kOneScale,
                      kOneScale);
      gpu::fp8_matmul(a.gpu_q, a.gpu_inv, b.gpu_q, b.gpu_inv, c.bias ? bias.gpu : none, c_gpu, d.gpu, c.fast, kOneScale,
                      kOneScale);
      s.row("fp8_matmul", tn, shape, rel_error(d.gpu.to_host_floats(), d_cpu.to_host_floats()),
            c.fast ? gpu_check::kOpFp8MatmulFastAccum : gpu_check::kOpFp8Matmul);
    });
  }
  // What cuBLASLt's FP8 kernels cannot take is refused with a message, not a cuBLAS status.
  struct Refusal {
    const char* what;
    int64_t n, k;
    DType fa, fb, d;
    bool bias;
  };
  for (const Refusal& r : {Refusal{"K not a multiple of 16", 48, 40, e4, e4, bf, false},
                           Refusal{"N not a multiple of 16", 40, 64, e4, e4, bf, false},
                           Refusal{"e5m2 x e5m2", 48, 64, e5, e5, bf, false}}) {
    s.run("fp8_matmul", "refusal", r.what, [&] {
      const Fp8Operand a = fp8_operand(s, {32, r.k}, r.fa, 405, 1.0f);
      const Fp8Operand b = fp8_operand(s, {r.n, r.k}, r.fb, 406, 1.0f);
      auto bias = s.make({r.n}, r.d, 407);
      auto d = s.output({32, r.n}, r.d);
      std::string message;
      try {
        gpu::fp8_matmul(a.gpu_q, a.gpu_inv, b.gpu_q, b.gpu_inv, r.bias ? bias.gpu : Tensor(), Tensor(), d.gpu, false,
                        kOneScale, kOneScale);
      } catch (const std::exception& e) {
        message = e.what();
      }
      const size_t at = message.find("fp8_matmul: ");  // the op's own message, not a cuBLAS status
      s.row("fp8_matmul refuses", "refusal", r.what, at != std::string::npos ? 0.0 : 1.0, gpu_check::kOpExact,
            message.empty() ? "did not throw" : message.substr(at == std::string::npos ? 0 : at, 110));
    });
  }
}

// ---- the FP8 linear layer at Llama-3-8B's shapes ----

// Llama-3-8B's projections (in, out): the fused qkv (4096 -> 4096 + 2 x 1024), o, the fused gate_up (4096 ->
// 2 x 14336) and down.
struct LinearShape {
  const char* name;
  int64_t in, out;
};
const std::vector<LinearShape> kLlama8B = {
    {"qkv", 4096, 6144}, {"o", 4096, 4096}, {"gate_up", 4096, 28672}, {"down", 14336, 4096}};

Tensor upload_f32(CudaDevice& dev, const Shape& shape, const std::vector<float>& v) {
  Tensor t = Tensor::empty(shape, DType::F32, dev, "fp8 linear input");
  t.copy_from_host(v.data());
  return t;
}

Tensor cast_to(CudaDevice& dev, const Tensor& src, DType t) {
  Tensor out = Tensor::empty(src.shape(), t, dev, "cast");
  gpu::cast(src, out);
  return out;
}

// A quantized tensor: amax, q and/or q_t, inv_scale, from the ops under test.
struct Quantized {
  Tensor amax, q, q_t, inv;
};
Quantized quantize(CudaDevice& dev, const Tensor& x, DType format, bool with_q = true, bool with_t = true) {
  const int64_t r = x.dim(0), c = x.dim(1);
  Quantized out{
      Tensor::empty({1}, DType::F32, dev, "amax"), with_q ? Tensor::empty({r, c}, format, dev, "q") : Tensor(),
      with_t ? Tensor::empty({c, r}, format, dev, "q_t") : Tensor(), Tensor::empty({1}, DType::F32, dev, "inv_scale")};
  gpu::amax(x, out.amax, kOneScale, false);
  gpu::fp8_quantize(x, out.amax, out.q, out.q_t, out.inv, kOneScale);
  return out;
}

// 10 log10(||ref||^2 / ||got - ref||^2) on the GPU (sums of squares in double), and the relative error it means.
struct Sqnr {
  double db, rel;
};
Sqnr sqnr(CudaDevice& dev, const Tensor& ref, const Tensor& got) {
  Tensor diff = Tensor::empty(ref.shape(), DType::F32, dev, "sqnr difference");
  gpu::cast(got, diff);
  gpu::axpy(-1.0f, ref, diff);
  const double noise = gpu::sum_squares(diff), signal = gpu::sum_squares(ref);
  return {10.0 * std::log10(signal / noise), std::sqrt(noise / signal)};
}

double rel_bound(double db) { return std::pow(10.0, -db / 20.0); }

void check_fp8_linear(Suite& s) {
  const int64_t N = 8192;  // tokens: a micro-batch of 2 x 4096
  CudaDevice& dev = s.dev();
  for (const LinearShape& ls : kLlama8B) {
    const std::string shape = std::string(ls.name) + " " + dims({N, ls.in, ls.out});
    s.run("fp8 linear", "e4m3/e5m2", shape, [&] {
      // Activations ~N(0, 1) with four outlier channels 20x larger (the LLM's massive activations set amax), weights
      // ~N(0, 0.02), output gradients ~N(0, 1e-4).
      std::vector<float> xv = normals(N * ls.in, 500, 1.0f);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j : {int64_t{17}, int64_t{1000}, int64_t{2049}, int64_t{3333}}) xv[i * ls.in + j] *= 20.0f;
      const Tensor x32 = upload_f32(dev, {N, ls.in}, xv);
      xv.clear();
      xv.shrink_to_fit();
      const Tensor w32 = upload_f32(dev, {ls.out, ls.in}, normals(ls.out * ls.in, 501, 0.02f));
      const Tensor dy32 = upload_f32(dev, {N, ls.out}, normals(N * ls.out, 502, 1e-4f));
      // The fp32 reference (cuBLASLt's fp32 compute on f32 operands: true fp32).
      Tensor y_ref = Tensor::empty({N, ls.out}, DType::F32, dev, "y ref");
      Tensor dx_ref = Tensor::empty({N, ls.in}, DType::F32, dev, "dx ref");
      Tensor dw_ref = Tensor::empty({ls.out, ls.in}, DType::F32, dev, "dW ref");
      gpu::matmul(x32, w32, y_ref, false, true, 0.0f);
      gpu::matmul(dy32, w32, dx_ref, false, false, 0.0f);
      gpu::matmul(dy32, x32, dw_ref, true, false, 0.0f);
      // bf16: the operands rounded, products through cuBLASLt, dW into f32 (the training case).
      const DType bf = DType::BF16;
      const Tensor x = cast_to(dev, x32, bf), w = cast_to(dev, w32, bf), dy = cast_to(dev, dy32, bf);
      Tensor y_bf = Tensor::empty({N, ls.out}, bf, dev, "y"), dx_bf = Tensor::empty({N, ls.in}, bf, dev, "dx");
      Tensor dw_bf = Tensor::empty({ls.out, ls.in}, DType::F32, dev, "dW");
      gpu::matmul(x, w, y_bf, false, true, 0.0f);
      gpu::matmul(dy, w, dx_bf, false, false, 0.0f);
      gpu::matmul(dy, x, dw_bf, true, false, 0.0f);
      // FP8 from the bf16 tensors: x and W in e4m3, dy in e5m2 (and e4m3 for comparison), every product TN:
      // y = x_q (N, in) . W_q (out, in)^T, dx = dy_q (N, out) . W^T_q (in, out)^T, dW = dy^T_q (out, N) . x^T_q (in,
      // N)^T.
      const Quantized xq = quantize(dev, x, DType::E4M3), wq = quantize(dev, w, DType::E4M3);
      const Tensor none;
      Tensor y8 = Tensor::empty({N, ls.out}, bf, dev, "y fp8");
      gpu::fp8_matmul(xq.q, xq.inv, wq.q, wq.inv, none, none, y8, true, kOneScale, kOneScale);
      const Sqnr y_b = sqnr(dev, y_ref, y_bf), y_8 = sqnr(dev, y_ref, y8);
      char note[128];
      std::snprintf(note, sizeof note, "SQNR fp8 %.1f dB (fast accum), bf16 %.1f dB", y_8.db, y_b.db);
      s.row("fp8 linear y = x W^T", "e4m3", shape, y_8.rel, rel_bound(gpu_check::kFp8SqnrDb), note);
      const Sqnr dx_b = sqnr(dev, dx_ref, dx_bf), dw_b = sqnr(dev, dw_ref, dw_bf);
      for (DType grad : {DType::E5M2, DType::E4M3}) {
        const Quantized dyq = quantize(dev, dy, grad);
        Tensor dx8 = Tensor::empty({N, ls.in}, bf, dev, "dx fp8");
        Tensor dw8 = Tensor::zeros({ls.out, ls.in}, DType::F32, dev, "dW fp8");  // accumulated into, as in training
        gpu::fp8_matmul(dyq.q, dyq.inv, wq.q_t, wq.inv, none, none, dx8, false, kOneScale, kOneScale);
        gpu::fp8_matmul(dyq.q_t, dyq.inv, xq.q_t, xq.inv, none, dw8, dw8, false, kOneScale, kOneScale);
        const double bound = rel_bound(grad == DType::E5M2 ? gpu_check::kFp8SqnrE5m2Db : gpu_check::kFp8SqnrDb);
        const std::string tn = std::string("dy ") + fmt_name(grad);
        const Sqnr dx_8 = sqnr(dev, dx_ref, dx8), dw_8 = sqnr(dev, dw_ref, dw8);
        std::snprintf(note, sizeof note, "SQNR fp8 %.1f dB, bf16 %.1f dB", dx_8.db, dx_b.db);
        s.row("fp8 linear dx = dy W", tn, shape, dx_8.rel, bound, note);
        std::snprintf(note, sizeof note, "SQNR fp8 %.1f dB, bf16 %.1f dB (dW f32)", dw_8.db, dw_b.db);
        s.row("fp8 linear dW = dy^T x", tn, shape, dw_8.rel, bound, note);
      }
    });
  }
}

}  // namespace

void check_fp8(Suite& s) {
  check_amax(s);
  check_quantize(s);
  check_amax_blocks(s);
  check_quantize_blocks(s);
  check_fp8_matmul(s);
  check_fp8_matmul_blocks(s);
  check_fp8_linear(s);
}

// ---- timings ----

void bench_fp8(CudaDevice& dev) {
  std::printf("\n%-58s %10s %14s %10s\n", "FP8 linear layer, Llama-3-8B, N = 16384 (median of 20)", "ms", "rate",
              "vs bf16");
  auto print = [](const std::string& what, double ms, double amount, const char* unit, double base_ms) {
    const double per_second = amount / (ms * 1e-3);
    const double shown = std::string(unit) == "TFLOP/s" ? per_second / 1e12 : per_second / 1e9;
    if (base_ms > 0) {
      std::printf("%-58s %10.3f %10.1f %s %9.2fx\n", what.c_str(), ms, shown, unit, base_ms / ms);
    } else {
      std::printf("%-58s %10.3f %10.1f %s\n", what.c_str(), ms, shown, unit);
    }
    std::fflush(stdout);
  };
  const DType bf = DType::BF16, e4 = DType::E4M3, e5 = DType::E5M2, f32 = DType::F32;
  const int64_t N = 16384;
  const int64_t pool_n = int64_t{1} << 24;
  Tensor pool = Tensor::empty({pool_n}, bf, dev, "random pool");
  pool.copy_from_host(encode(normals(pool_n, 600), bf).data());
  const Tensor none;
  for (const LinearShape& ls : kLlama8B) {
    const std::string at =
        std::string(" ") + ls.name + " (" + std::to_string(ls.in) + "->" + std::to_string(ls.out) + ")";
    Tensor x = Tensor::empty({N, ls.in}, bf, dev, "x"), w = Tensor::empty({ls.out, ls.in}, bf, dev, "w");
    Tensor dy = Tensor::empty({N, ls.out}, bf, dev, "dy");
    fill_random(pool, x, 1.0f);
    fill_random(pool, w, 0.02f);
    fill_random(pool, dy, 1e-4f);
    Tensor y = Tensor::empty({N, ls.out}, bf, dev, "y"), dx = Tensor::empty({N, ls.in}, bf, dev, "dx");
    Tensor dw = Tensor::zeros({ls.out, ls.in}, f32, dev, "dW");
    const Quantized xq = quantize(dev, x, e4), wq = quantize(dev, w, e4), dyq = quantize(dev, dy, e5);
    const double flops = 2.0 * N * ls.in * ls.out;
    // The three products, bf16 then FP8 (the forward with fast accumulation, the gradients without).
    const double fwd_bf = median_ms(dev, [&] { gpu::linear_forward(x, w, none, none, y); });
    print("fwd  y = x W^T, bf16 linear_forward" + at, fwd_bf, flops, "TFLOP/s", 0);
    const double fwd_8 =
        median_ms(dev, [&] { gpu::fp8_matmul(xq.q, xq.inv, wq.q, wq.inv, none, none, y, true, kOneScale, kOneScale); });
    print("fwd  y = x W^T, fp8_matmul e4m3 fast accum" + at, fwd_8, flops, "TFLOP/s", fwd_bf);
    const double dx_bf = median_ms(dev, [&] { gpu::matmul(dy, w, dx, false, false, 0.0f); });
    print("bwd  dx = dy W, bf16 matmul" + at, dx_bf, flops, "TFLOP/s", 0);
    const double dx_8 = median_ms(
        dev, [&] { gpu::fp8_matmul(dyq.q, dyq.inv, wq.q_t, wq.inv, none, none, dx, false, kOneScale, kOneScale); });
    print("bwd  dx = dy W, fp8_matmul e5m2 x e4m3" + at, dx_8, flops, "TFLOP/s", dx_bf);
    const double dw_bf = median_ms(dev, [&] { gpu::matmul(dy, x, dw, true, false, 1.0f); });
    print("bwd  dW += dy^T x, bf16 matmul into f32" + at, dw_bf, flops, "TFLOP/s", 0);
    const double dw_8 = median_ms(
        dev, [&] { gpu::fp8_matmul(dyq.q_t, dyq.inv, xq.q_t, xq.inv, none, dw, dw, false, kOneScale, kOneScale); });
    print("bwd  dW += dy^T x, fp8_matmul e5m2 x e4m3 into f32" + at, dw_8, flops, "TFLOP/s", dw_bf);
    // The casts: amax (reads x), fp8_quantize to q (reads x, writes a byte each), to q and q_t (two bytes each).
    for (const auto& [name, t, fmt] : {std::tuple<const char*, const Tensor&, DType>{"x", x, e4}, {"dy", dy, e5}}) {
      const double n = static_cast<double>(t.numel());
      Tensor a = Tensor::empty({1}, f32, dev, "amax"), inv = Tensor::empty({1}, f32, dev, "inv");
      Tensor q = Tensor::empty(t.shape(), fmt, dev, "q"), qt = Tensor::empty({t.dim(1), t.dim(0)}, fmt, dev, "q_t");
      gpu::amax(t, a, kOneScale, false);
      const std::string what = std::string(" ") + name + " " + dims({t.dim(0), t.dim(1)}) + " bf16";
      print("amax" + what, median_ms(dev, [&] { gpu::amax(t, a, kOneScale, false); }), 2 * n, "GB/s", 0);
      print("fp8_quantize q" + what, median_ms(dev, [&] { gpu::fp8_quantize(t, a, q, none, inv, kOneScale); }), 3 * n,
            "GB/s", 0);
      print("fp8_quantize q and q_t" + what, median_ms(dev, [&] { gpu::fp8_quantize(t, a, q, qt, inv, kOneScale); }),
            4 * n, "GB/s", 0);
      print("fp8_quantize q_t alone" + what, median_ms(dev, [&] { gpu::fp8_quantize(t, a, none, qt, inv, kOneScale); }),
            3 * n, "GB/s", 0);
    }
    // One training step of the layer: bf16's three products against FP8's three casts (amax and quantize of x, W
    // and dy, each with its transposed copy) and three products. W's cast is counted in every step here, though a
    // run with several micro-batches makes it once per optimizer step.
    const double step_bf = median_ms(dev, [&] {
      gpu::linear_forward(x, w, none, none, y);
      gpu::matmul(dy, w, dx, false, false, 0.0f);
      gpu::matmul(dy, x, dw, true, false, 1.0f);
    });
    print("step bf16: 3 products" + at, step_bf, 3 * flops, "TFLOP/s", 0);
    const double step_8 = median_ms(dev, [&] {
      for (const auto& [t, qz] : {std::pair<const Tensor&, const Quantized&>{x, xq}, {w, wq}, {dy, dyq}}) {
        gpu::amax(t, qz.amax, kOneScale, false);
        gpu::fp8_quantize(t, qz.amax, qz.q, qz.q_t, qz.inv, kOneScale);
      }
      gpu::fp8_matmul(xq.q, xq.inv, wq.q, wq.inv, none, none, y, true, kOneScale, kOneScale);
      gpu::fp8_matmul(dyq.q, dyq.inv, wq.q_t, wq.inv, none, none, dx, false, kOneScale, kOneScale);
      gpu::fp8_matmul(dyq.q_t, dyq.inv, xq.q_t, xq.inv, none, dw, dw, false, kOneScale, kOneScale);
    });
    print("step fp8: 3 x (amax + quantize q, q_t) + 3 products" + at, step_8, 3 * flops, "TFLOP/s", step_bf);
  }
  bench_fp8_recipes(dev, pool);
}

}  // namespace tandem::ops_check