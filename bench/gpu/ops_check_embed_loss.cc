// ops_check: embedding, cross-entropy, the reductions, AdamW and the errors a CUDA op reports later, CUDA against
// the CPU.
#include "ops_check.h"

namespace tandem::ops_check {

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
      // The updated weights rounded to bf16 as well (the offloaded optimizer's values for the device): against the
      // CPU's updated weights rounded the same way.
      const Tensor values = s.output({n}, DType::BF16).gpu;
      cpu::adamw_step(param.cpu, grad.cpu, m.cpu, v.cpu, p, Tensor());
      gpu::adamw_step(param.gpu, grad.gpu, m.gpu, v.gpu, p, values);
      s.compare("adamw_step param", DType::F32, dims({n}), param.gpu, param.cpu);
      s.compare("adamw_step rounded", DType::BF16, dims({n}), values, rounded(param.cpu.to_host_floats(), DType::BF16));
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

}  // namespace tandem::ops_check
