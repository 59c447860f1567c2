// ops_check's rows for the experts' grouped products on their second CUDA path, one cublasGemmGroupedBatchedEx call
// (ops/cuda/grouped_path.h, grouped_gemm.h), named explicitly whatever the rule picks: against the CPU op in every
// case the loop's rows cover (uneven rows with an empty group, both forms of the stack, beta 1, the weight gradient
// accumulating), over more groups than one launch of the pointer kernel writes, the same bits on a second run, and
// the f32 weight gradient of 16-bit inputs refused (cuBLAS's call documents no such type combination; a last note
// says whether it takes it anyway). bench_moe times both paths side by side at the Qwen3-30B-A3B experts' shapes, with
// the same rows every call and with new ones every call (as in training, where the loop meets product shapes it has no
// plan for yet).
#include <algorithm>
#include <tuple>

#include "ops_check.h"
#include "tandem/ops/cuda/grouped_gemm.h"

namespace tandem::ops_check {
namespace {

constexpr gpu::GroupedPath kOne = gpu::GroupedPath::OneCall, kLoop = gpu::GroupedPath::Loop;

// A device copy of a CUDA tensor (the weight gradient accumulates into it, so two runs need the same start).
Tensor clone(Suite& s, const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), s.dev(), "gpu clone");
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(c.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToDevice, s.dev().compute_stream()));
  return c;
}

}  // namespace

void check_moe_grouped(Suite& s) {
  const std::vector<int64_t> rows = {700, 0, 1, 333, 1024};
  const int64_t m = 2058, n = 1536, k = 2048;
  const std::string shape = "5 groups (" + std::to_string(m) + ", " + std::to_string(k) + ") x " + dims({5, n, k});
  for (DType t : kFloatTypes) {
    s.run("grouped_matmul (one call)", dtype_name(t), shape, [&] {
      auto a = s.make({m, k}, t, 650), b = s.make({5, n, k}, t, 651, 0.02f);
      auto c = s.output({m, n}, t);
      cpu::grouped_matmul(a.cpu, b.cpu, c.cpu, rows, true, 0.0f);
      gpu::grouped_matmul_on(kOne, a.gpu, b.gpu, c.gpu, rows, true, 0.0f);
      s.compare("grouped_matmul (one call)", t, shape, c.gpu, c.cpu);
      Tensor again = Tensor::empty({m, n}, t, s.dev(), "gpu c again");
      gpu::grouped_matmul_on(kOne, a.gpu, b.gpu, again, rows, true, 0.0f);
      s.row("grouped_matmul (one call) rerun bits", dtype_name(t), shape, same_bits(c.gpu, again) ? 0.0 : 1.0, 0.0);
      auto back = s.output({m, k}, t);
      cpu::grouped_matmul(c.cpu, b.cpu, back.cpu, rows, false, 0.0f);
      gpu::grouped_matmul_on(kOne, s.upload(c.cpu, t), b.gpu, back.gpu, rows, false, 0.0f);
      s.compare("grouped_matmul (one call, b not tr.)", t, shape, back.gpu, back.cpu);
      // beta 1: c += a @ b[g]^T over c's own values.
      auto y = s.make({m, n}, t, 652);
      cpu::grouped_matmul(a.cpu, b.cpu, y.cpu, rows, true, 1.0f);
      gpu::grouped_matmul_on(kOne, a.gpu, b.gpu, y.gpu, rows, true, 1.0f);
      s.compare("grouped_matmul (one call, beta 1)", t, shape, y.gpu, y.cpu);
    });
    s.run("grouped_weight_grad (one call)", dtype_name(t), shape, [&] {
      auto dy = s.make({m, n}, t, 653), x = s.make({m, k}, t, 654);
      auto dw = s.make({5, n, k}, t, 655);  // in the inputs' dtype: the call's only output type
      const Tensor start = clone(s, dw.gpu);
      cpu::grouped_weight_grad(dy.cpu, x.cpu, dw.cpu, rows);
      gpu::grouped_weight_grad_on(kOne, dy.gpu, x.gpu, dw.gpu, rows);
      s.compare("grouped_weight_grad (one call)", t, shape, dw.gpu, dw.cpu);
      gpu::grouped_weight_grad_on(kOne, dy.gpu, x.gpu, start, rows);
      s.row("grouped_weight_grad (one call) rerun bits", dtype_name(t), shape, same_bits(dw.gpu, start) ? 0.0 : 1.0,
            0.0);
      if (t == DType::F32) return;
      // An f32 dw beside 16-bit inputs (the training layer's weight gradients) is no type combination of the call's.
      Tensor dw32 = Tensor::zeros({5, n, k}, DType::F32, s.dev(), "gpu f32 dw");
      bool refused = false;
      try {
        gpu::grouped_weight_grad_on(kOne, dy.gpu, x.gpu, dw32, rows);
      } catch (const Error&) {
        refused = true;
      }
      s.row("grouped_weight_grad (one call) f32 dw", dtype_name(t), shape, refused ? 0.0 : 1.0, 0.0,
            refused ? "refused" : "taken");
    });
  }
  // 300 groups (some empty): two launches of the pointer kernel (256 groups each at most).
  const DType bf = DType::BF16;
  std::vector<int64_t> many(300);
  int64_t total = 0;
  for (size_t g = 0; g < many.size(); ++g) total += many[g] = static_cast<int64_t>((g * 7) % 11);
  const int64_t w = 64;
  const std::string many_shape = "300 groups (" + std::to_string(total) + ", 64) x " + dims({300, w, w});
  s.run("grouped_matmul (one call)", "bf16", many_shape, [&] {
    auto a = s.make({total, w}, bf, 656), b = s.make({300, w, w}, bf, 657, 0.1f);
    auto c = s.output({total, w}, bf);
    cpu::grouped_matmul(a.cpu, b.cpu, c.cpu, many, true, 0.0f);
    gpu::grouped_matmul_on(kOne, a.gpu, b.gpu, c.gpu, many, true, 0.0f);
    s.compare("grouped_matmul (one call, 300 gr.)", bf, many_shape, c.gpu, c.cpu);
    auto dw = s.make({300, w, w}, bf, 658);
    cpu::grouped_weight_grad(c.cpu, a.cpu, dw.cpu, many);
    gpu::grouped_weight_grad_on(kOne, s.upload(c.cpu, bf), a.gpu, dw.gpu, many);
    s.compare("grouped_weight_grad (one call, 300)", bf, many_shape, dw.gpu, dw.cpu);
  });
  // Not among cuBLAS's documented type combinations: bf16 inputs into an f32 C, the training layer's weight gradients.
  // The rule keeps them on the loop; the call is tried here directly, last of the checks (an undocumented case could
  // fault the context), and a note, not a row, says whether this cuBLAS takes it and how close it comes.
  s.run("grouped_weight_grad (call, f32 dw)", "bf16", shape, [&] {
    auto dy = s.make({m, n}, bf, 653), x = s.make({m, k}, bf, 654);
    auto dw = s.make({5, n, k}, DType::F32, 655);
    cpu::grouped_weight_grad(dy.cpu, x.cpu, dw.cpu, rows);
    try {
      gpu::queue_grouped_call(s.dev(), gpu::grouped_weight_grad_call(dy.gpu, x.gpu, dw.gpu), rows);
      s.dev().synchronize();
      std::printf("note: cuBLAS's grouped call took bf16 inputs into an f32 dw (undocumented): rel error %.3e\n",
                  rel_error(dw.gpu.to_host_floats(), dw.cpu.to_host_floats()));
    } catch (const Error& e) {
      std::printf("note: cuBLAS's grouped call refused bf16 inputs into an f32 dw, as documented: %s\n", e.what());
    }
  });
}

void bench_moe(CudaDevice& dev) {
  // Qwen3-30B-A3B's experts: 128 of width 768 (gate and up together 1536) on hidden 2048, 8192 tokens x top 8.
  const int64_t experts = 128, hidden = 2048, width = 768, routed = 8192 * 8;
  const DType bf = DType::BF16;
  std::vector<int64_t> balanced(experts, routed / experts), skewed(experts);
  // Skewed: expert e's share grows as the square of a scrambled index (1 to 128), so a few take ~1,500 rows and
  // many a handful; expert 0 takes what the rounding leaves.
  double sum = 0;
  for (int64_t e = 0; e < experts; ++e) sum += std::pow(static_cast<double>((e * 37) % experts + 1), 2.0);
  int64_t given = 0;
  for (int64_t e = 0; e < experts; ++e) {
    skewed[e] = static_cast<int64_t>(routed * std::pow(static_cast<double>((e * 37) % experts + 1), 2.0) / sum);
    given += skewed[e];
  }
  skewed[0] += routed - given;
  const auto [few, most] = std::minmax_element(skewed.begin(), skewed.end());
  std::printf("\nskewed routing: %lld to %lld rows an expert, %lld experts without rows\n",
              static_cast<long long>(*few), static_cast<long long>(*most),
              static_cast<long long>(std::count(skewed.begin(), skewed.end(), int64_t{0})));
  Tensor x = Tensor::empty({routed, hidden}, bf, dev, "x"), gu = Tensor::empty({routed, 2 * width}, bf, dev, "gate_up");
  Tensor h = Tensor::empty({routed, width}, bf, dev, "hidden"), y = Tensor::empty({routed, hidden}, bf, dev, "y");
  Tensor w_gu = Tensor::empty({experts, 2 * width, hidden}, bf, dev, "w gate_up");
  Tensor w_d = Tensor::empty({experts, hidden, width}, bf, dev, "w down");
  Tensor dw_gu = Tensor::zeros({experts, 2 * width, hidden}, bf, dev, "dw gate_up");
  Tensor dw_d = Tensor::zeros({experts, hidden, width}, bf, dev, "dw down");
  Tensor dw_d32 = Tensor::zeros({experts, hidden, width}, DType::F32, dev, "dw down f32");
  Tensor dw_gu32 = Tensor::zeros({experts, 2 * width, hidden}, DType::F32, dev, "dw gate_up f32");
  std::printf("%-50s %9s %9s %9s %9s %8s\n", "grouped products, Qwen3-30B-A3B experts (bf16)", "loop ms", "TFLOP/s",
              "1 call ms", "TFLOP/s", "speedup");
  for (const auto& [split, rows] :
       {std::pair<const char*, const std::vector<int64_t>&>{"balanced", balanced}, {"skewed", skewed}}) {
    for (Tensor* t : {&x, &gu, &h, &y, &w_gu, &w_d}) gpu::fill(*t, 0.01f);
    // what, FLOPs, and the op on a path.
    const std::vector<std::tuple<std::string, double, std::function<void(gpu::GroupedPath)>>> products = {
        {"gate_up fwd (2048 -> 1536)", 2.0 * routed * 2 * width * hidden,
         [&](gpu::GroupedPath p) { gpu::grouped_matmul_on(p, x, w_gu, gu, rows, true, 0.0f); }},
        {"down fwd (768 -> 2048)", 2.0 * routed * hidden * width,
         [&](gpu::GroupedPath p) { gpu::grouped_matmul_on(p, h, w_d, y, rows, true, 0.0f); }},
        {"down dgrad (2048 -> 768)", 2.0 * routed * hidden * width,
         [&](gpu::GroupedPath p) { gpu::grouped_matmul_on(p, y, w_d, h, rows, false, 0.0f); }},
        {"gate_up dgrad (1536 -> 2048)", 2.0 * routed * 2 * width * hidden,
         [&](gpu::GroupedPath p) { gpu::grouped_matmul_on(p, gu, w_gu, x, rows, false, 0.0f); }},
        {"down wgrad, bf16 dw", 2.0 * routed * hidden * width,
         [&](gpu::GroupedPath p) { gpu::grouped_weight_grad_on(p, y, h, dw_d, rows); }},
        {"gate_up wgrad, bf16 dw", 2.0 * routed * 2 * width * hidden,
         [&](gpu::GroupedPath p) { gpu::grouped_weight_grad_on(p, gu, x, dw_gu, rows); }},
    };
    for (const auto& [what, flops, op] : products) {
      const double loop = median_ms(dev, [&] { op(kLoop); });
      const double one = median_ms(dev, [&] { op(kOne); });
      std::printf("%-50s %9.3f %9.1f %9.3f %9.1f %7.2fx\n", (what + ", " + split).c_str(), loop,
                  flops / (loop * 1e-3) / 1e12, one, flops / (one * 1e-3) / 1e12, loop / one);
      std::fflush(stdout);
    }
    // The training layer's f32 weight gradients: the loop only (no such type combination in the call).
    for (const auto& [what, flops, dy, in, dw] :
         {std::tuple<const char*, double, const Tensor&, const Tensor&, const Tensor&>{
              "down wgrad, f32 dw", 2.0 * routed * hidden * width, y, h, dw_d32},
          {"gate_up wgrad, f32 dw", 2.0 * routed * 2 * width * hidden, gu, x, dw_gu32}}) {
      const double loop = median_ms(dev, [&] { gpu::grouped_weight_grad_on(kLoop, dy, in, dw, rows); });
      std::printf("%-50s %9.3f %9.1f %9s %9s %8s\n", (std::string(what) + ", " + split).c_str(), loop,
                  flops / (loop * 1e-3) / 1e12, "-", "-", "-");
      std::fflush(stdout);
    }
  }
  // The loop keeps one cuBLASLt plan per product shape, and an expert's rows change every step, so training's first
  // steps meet shapes it has not seen. Here every call gets rows no earlier call had (expert e's 300 + (37 e + 41 c)
  // mod 211 in call c: distinct over the calls and over the experts of a call, at most 65,280 in all).
  int call = 0;
  auto fresh_rows = [&] {
    std::vector<int64_t> r(experts);
    for (int64_t e = 0; e < experts; ++e) r[e] = 300 + (37 * e + 41 * call) % 211;
    ++call;
    return r;
  };
  const double flops = 2.0 * 65280 * 2 * width * hidden;  // about: the rows vary a little from call to call
  for (const auto& [path, label] : {std::pair{kLoop, "loop"}, std::pair{kOne, "1 call"}}) {
    call = 1000 * (path == kOne);  // the call path sees the same kind of rows, not the loop's shapes again
    const double ms = median_ms(dev, [&] { gpu::grouped_matmul_on(path, x, w_gu, gu, fresh_rows(), true, 0.0f); });
    std::printf("gate_up fwd, new rows every call, %-6s %9.3f ms, about %.1f TFLOP/s\n", label, ms,
                flops / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
}

}  // namespace tandem::ops_check
