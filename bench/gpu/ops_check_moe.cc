// ops_check's mixture-of-experts rows: the experts' grouped products (and their LoRA adapters' narrow ones), the
// router (softmax, top-k, weights, its backward and the balance sums), the grouping by expert, and the gather and
// combine of routed rows, CUDA against the CPU op at the Qwen3-30B-A3B shape's router (128 experts, top 8) and a
// smaller odd one, and the sigmoid of Qwen2-MoE's shared-expert gate. Choices, rows and offsets must be equal; the
// float outputs within the op bounds; the balance sums and the combine's backward the same bits on a second run.
#include "ops_check.h"

namespace tandem::ops_check {
namespace {

// Equal i32 tensors: the row's error is the number of elements that differ (bound 0).
void compare_ints(Suite& s, const std::string& op, const std::string& shape, const Tensor& got, const Tensor& want) {
  std::vector<int32_t> g(static_cast<size_t>(got.numel()));
  got.copy_to_host(g.data());
  double differ = 0;
  for (size_t i = 0; i < g.size(); ++i) differ += g[i] != want.i32()[i] ? 1 : 0;
  s.row(op, "i32", shape, differ, 0.0);
}

void bitwise_rerun(Suite& s, const std::string& op, const std::string& shape, const Tensor& first,
                   const Tensor& again) {
  s.row(op + " rerun bits", dtype_name(first.dtype()), shape, same_bits(first, again) ? 0.0 : 1.0, 0.0);
}

Tensor device_copy(Suite& s, const Tensor& cpu_i32) {
  Tensor g = Tensor::empty(cpu_i32.shape(), DType::I32, s.dev(), "gpu ints");
  g.copy_from_host(cpu_i32.raw());
  return g;
}

}  // namespace

void check_moe(Suite& s) {
  // The experts' products in groups of uneven rows (one empty), both forms of the stack, and the weight gradients.
  for (DType t : kFloatTypes) {
    const std::vector<int64_t> rows = {700, 0, 1, 333, 1024};
    const int64_t m = 2058, n = 1536, k = 2048;
    const std::string shape = "5 groups (" + std::to_string(m) + ", " + std::to_string(k) + ") x " + dims({5, n, k});
    s.run("grouped_matmul", dtype_name(t), shape, [&] {
      auto a = s.make({m, k}, t, 630), b = s.make({5, n, k}, t, 631, 0.02f);
      auto c = s.output({m, n}, t);
      cpu::grouped_matmul(a.cpu, b.cpu, c.cpu, rows, true, 0.0f);
      gpu::grouped_matmul(a.gpu, b.gpu, c.gpu, rows, true, 0.0f);
      s.compare("grouped_matmul", t, shape, c.gpu, c.cpu);
      auto back = s.output({m, k}, t);
      cpu::grouped_matmul(c.cpu, b.cpu, back.cpu, rows, false, 0.0f);
      gpu::grouped_matmul(s.upload(c.cpu, t), b.gpu, back.gpu, rows, false, 0.0f);
      s.compare("grouped_matmul (b not transposed)", t, shape, back.gpu, back.cpu);
    });
    s.run("grouped_weight_grad", dtype_name(t), shape, [&] {
      auto dy = s.make({m, n}, t, 632), x = s.make({m, k}, t, 633);
      auto dw = s.make({5, n, k}, DType::F32, 634);
      cpu::grouped_weight_grad(dy.cpu, x.cpu, dw.cpu, rows);
      gpu::grouped_weight_grad(dy.gpu, x.gpu, dw.gpu, rows);
      s.compare("grouped_weight_grad", t, shape, dw.gpu, dw.cpu);
    });
    // The experts' LoRA adapters (nn/expert_lora.h): the narrow products of rank r over the same groups, H = x A_e^T
    // (m, r), y += H B_e^T (beta 1 over the base's output), and their gradients; rank 4 puts each group's rows of H
    // at 8-byte offsets in 16-bit types.
    for (const int64_t r : {int64_t{4}, int64_t{16}}) {
      const std::string lora = shape + " rank " + std::to_string(r);
      s.run("grouped_matmul (LoRA)", dtype_name(t), lora, [&] {
        auto x = s.make({m, k}, t, 635), a = s.make({5, r, k}, t, 636, 0.02f), b = s.make({5, n, r}, t, 637, 0.2f);
        auto h = s.output({m, r}, t);
        cpu::grouped_matmul(x.cpu, a.cpu, h.cpu, rows, true, 0.0f);
        gpu::grouped_matmul(x.gpu, a.gpu, h.gpu, rows, true, 0.0f);
        s.compare("grouped_matmul (LoRA down)", t, lora, h.gpu, h.cpu);
        auto y = s.make({m, n}, t, 638);
        cpu::grouped_matmul(h.cpu, b.cpu, y.cpu, rows, true, 1.0f);
        gpu::grouped_matmul(s.upload(h.cpu, t), b.gpu, y.gpu, rows, true, 1.0f);
        s.compare("grouped_matmul (LoRA up, beta 1)", t, lora, y.gpu, y.cpu);
        auto dy = s.make({m, n}, t, 639);
        auto g = s.output({m, r}, t);
        cpu::grouped_matmul(dy.cpu, b.cpu, g.cpu, rows, false, 0.0f);
        gpu::grouped_matmul(dy.gpu, b.gpu, g.gpu, rows, false, 0.0f);
        s.compare("grouped_matmul (LoRA dy B)", t, lora, g.gpu, g.cpu);
        auto db = s.make({5, n, r}, DType::F32, 640), da = s.make({5, r, k}, DType::F32, 641);
        cpu::grouped_weight_grad(dy.cpu, h.cpu, db.cpu, rows);
        gpu::grouped_weight_grad(dy.gpu, s.upload(h.cpu, t), db.gpu, rows);
        s.compare("grouped_weight_grad (LoRA dB)", t, lora, db.gpu, db.cpu);
        cpu::grouped_weight_grad(g.cpu, x.cpu, da.cpu, rows);
        gpu::grouped_weight_grad(s.upload(g.cpu, t), x.gpu, da.gpu, rows);
        s.compare("grouped_weight_grad (LoRA dA)", t, lora, da.gpu, da.cpu);
      });
    }
  }
  // The shared expert's gate: a sigmoid per token (f32, as the layer runs it) and its backward from the output.
  for (const int64_t n : {37, 16384}) {
    const std::string shape = dims({n, 1});
    s.run("sigmoid_forward", "f32", shape, [&] {
      auto x = s.make({n, 1}, DType::F32, 640, 3.0f);
      auto y = s.output({n, 1}, DType::F32);
      cpu::sigmoid_forward(x.cpu, y.cpu);
      gpu::sigmoid_forward(x.gpu, y.gpu);
      s.compare("sigmoid_forward", DType::F32, shape, y.gpu, y.cpu);
      auto dy = s.make({n, 1}, DType::F32, 641);
      auto dx = s.output({n, 1}, DType::F32);
      cpu::sigmoid_backward(y.cpu, dy.cpu, dx.cpu);
      gpu::sigmoid_backward(s.upload(y.cpu, DType::F32), dy.gpu, dx.gpu);
      s.compare("sigmoid_backward", DType::F32, shape, dx.gpu, dx.cpu);
    });
  }
  for (const auto& [n, e, k, c] : std::vector<std::array<int64_t, 4>>{{37, 6, 2, 13}, {2048, 128, 8, 256}}) {
    const std::string route_shape = dims({n, e}) + " k " + std::to_string(k);
    for (const bool normalize : {true, false}) {
      const std::string label = route_shape + (normalize ? " norm" : "");
      auto logits = s.make({n, e}, DType::F32, 600 + e, 2.0f);
      auto probs = s.output({n, e}, DType::F32), weights = s.output({n, k}, DType::F32);
      Tensor idx_cpu = Tensor::empty({n, k}, DType::I32, s.host(), "cpu idx");
      Tensor idx_gpu = Tensor::empty({n, k}, DType::I32, s.dev(), "gpu idx");
      s.run("moe_route", "f32", label, [&] {
        cpu::moe_route(logits.cpu, static_cast<int>(k), normalize, probs.cpu, idx_cpu, weights.cpu);
        gpu::moe_route(logits.gpu, static_cast<int>(k), normalize, probs.gpu, idx_gpu, weights.gpu);
        s.compare("moe_route probs", DType::F32, label, probs.gpu, probs.cpu);
        s.compare("moe_route weights", DType::F32, label, weights.gpu, weights.cpu);
        compare_ints(s, "moe_route idx", label, idx_gpu, idx_cpu);
      });
      // The rest read the CPU's choices, so a tie broken otherwise cannot hide a difference downstream.
      const Tensor idx = device_copy(s, idx_cpu);
      s.run("moe_route_backward", "f32", label, [&] {
        auto dweights = s.make({n, k}, DType::F32, 610);
        auto aux = s.make({e}, DType::F32, 611, 0.1f);
        auto dlogits = s.output({n, e}, DType::F32);
        cpu::moe_route_backward(probs.cpu, idx_cpu, dweights.cpu, normalize, aux.cpu, dlogits.cpu);
        gpu::moe_route_backward(probs.gpu, idx, dweights.gpu, normalize, aux.gpu, dlogits.gpu);
        s.compare("moe_route_backward", DType::F32, label, dlogits.gpu, dlogits.cpu);
      });
      if (!normalize) continue;
      s.run("moe_route_stats", "f32", label, [&] {
        Tensor counts = Tensor::zeros({e}, DType::F32, s.host(), "counts");
        Tensor probsum = Tensor::zeros({e}, DType::F32, s.host(), "probsum");
        cpu::moe_route_stats(probs.cpu, idx_cpu, counts, probsum);
        Tensor runs[2][2];
        for (auto& r : runs) {
          r[0] = Tensor::zeros({e}, DType::F32, s.dev(), "gpu counts");
          r[1] = Tensor::zeros({e}, DType::F32, s.dev(), "gpu probsum");
          gpu::moe_route_stats(probs.gpu, idx, r[0], r[1]);
        }
        s.compare("moe_route_stats counts", DType::F32, label, runs[0][0], counts);
        s.compare("moe_route_stats probsum", DType::F32, label, runs[0][1], probsum);
        bitwise_rerun(s, "moe_route_stats", label, runs[0][1], runs[1][1]);
      });
      const int64_t m = n * k;
      Tensor pos_cpu = Tensor::empty({n, k}, DType::I32, s.host(), "cpu pos");
      Tensor off_cpu = Tensor::empty({e + 1}, DType::I32, s.host(), "cpu offsets");
      cpu::moe_order(idx_cpu, static_cast<int>(e), pos_cpu, off_cpu);
      s.run("moe_order", "i32", label, [&] {
        Tensor pos = Tensor::empty({n, k}, DType::I32, s.dev(), "gpu pos");
        Tensor off = Tensor::empty({e + 1}, DType::I32, s.dev(), "gpu offsets");
        gpu::moe_order(idx, static_cast<int>(e), pos, off);
        compare_ints(s, "moe_order pos", label, pos, pos_cpu);
        compare_ints(s, "moe_order offsets", label, off, off_cpu);
        const bool rows_equal = gpu::moe_expert_rows(off, m) == cpu::moe_expert_rows(off_cpu, m);
        s.row("moe_expert_rows", "i32", label, rows_equal ? 0.0 : 1.0, 0.0);
      });
      const Tensor pos = device_copy(s, pos_cpu);
      for (DType t : kFloatTypes) {
        const std::string shape = dims({n, c}) + " k " + std::to_string(k);
        s.run("moe_gather", dtype_name(t), shape, [&] {
          auto x = s.make({n, c}, t, 620);
          auto xg = s.output({m, c}, t);
          cpu::moe_gather(x.cpu, pos_cpu, xg.cpu);
          gpu::moe_gather(x.gpu, pos, xg.gpu);
          s.compare("moe_gather", t, shape, xg.gpu, xg.cpu);
        });
        s.run("moe_combine", dtype_name(t), shape, [&] {
          auto yg = s.make({m, c}, t, 621);
          auto y = s.make({n, c}, t, 622);
          cpu::moe_combine(yg.cpu, pos_cpu, weights.cpu, y.cpu);
          gpu::moe_combine(yg.gpu, pos, weights.gpu, y.gpu);
          s.compare("moe_combine", t, shape, y.gpu, y.cpu);
        });
        s.run("moe_combine_backward", dtype_name(t), shape, [&] {
          auto dy = s.make({n, c}, t, 623);
          auto yg = s.make({m, c}, t, 624);
          auto dyg = s.output({m, c}, t), dw = s.output({n, k}, DType::F32);
          cpu::moe_combine_backward(dy.cpu, yg.cpu, pos_cpu, weights.cpu, dyg.cpu, dw.cpu);
          gpu::moe_combine_backward(dy.gpu, yg.gpu, pos, weights.gpu, dyg.gpu, dw.gpu);
          s.compare("moe_combine_backward dyg", t, shape, dyg.gpu, dyg.cpu);
          s.compare("moe_combine_backward dweights", t, shape, dw.gpu, dw.cpu);
          Tensor again = Tensor::empty({n, k}, DType::F32, s.dev(), "gpu dweights again");
          gpu::moe_combine_backward(dy.gpu, yg.gpu, pos, weights.gpu, dyg.gpu, again);
          bitwise_rerun(s, "moe_combine_backward", shape, dw.gpu, again);
        });
      }
    }
  }
  // The experts' products on the one-call path (ops_check_moe_grouped.cc), last: the rows above run the rule's path.
  check_moe_grouped(s);
}

}  // namespace tandem::ops_check
