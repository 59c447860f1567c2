// ops_check: the Llama-family ops (RMSNorm, over rows and per head, rotary embedding, SwiGLU, grouped-query attention,
// with the flash kernels' documents and long-sequence paths), CUDA against the CPU.
#include "ops_check.h"
#include "tandem/ops/cuda/attention_blocks.h"

namespace tandem::ops_check {

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

void check_head_norm_whole(Suite& s);

void check_head_norm(Suite& s) {
  struct Case {
    int64_t b, t, heads, kv_heads, d;  // a fused qkv (B, T, (H + 2 Hkv) D); q and k normalised, v passed
  };
  // D=6 and 40: partial warps; then Qwen3's shapes (0.6B: 16 query heads over 8, 8B: 32 over 8, D 128) on 2048 tokens,
  // enough rows for many slices of the gains' sums.
  const std::vector<Case> cases = {{3, 5, 3, 1, 6}, {2, 7, 4, 2, 40}, {1, 2048, 16, 8, 128}, {2, 1024, 32, 8, 128}};
  for (DType t : kFloatTypes) {
    for (const Case& c : cases) {
      const int64_t w = (c.heads + 2 * c.kv_heads) * c.d, n = c.b * c.t;
      const int h = static_cast<int>(c.heads), kv = static_cast<int>(c.kv_heads);
      const std::string shape = dims({c.b, c.t, w}) + " D=" + std::to_string(c.d);
      s.run("head_norm_forward", dtype_name(t), shape, [&] {
        auto x = s.make({c.b, c.t, w}, t, 230, 2.0f, 0.5f);
        auto q = s.make({c.d}, t, 231, 0.2f, 1.0f);
        auto k = s.make({c.d}, t, 232, 0.2f, 1.0f);
        auto y = s.output({c.b, c.t, w}, t);
        auto rstd = s.output({n, c.heads + c.kv_heads}, DType::F32);
        cpu::head_norm_forward(x.cpu, q.cpu, k.cpu, h, kv, y.cpu, rstd.cpu, 1e-6f, Tensor(), 0);
        gpu::head_norm_forward(x.gpu, q.gpu, k.gpu, h, kv, y.gpu, rstd.gpu, 1e-6f, Tensor(), 0);
        s.compare("head_norm_forward y", t, shape, y.gpu, y.cpu);
        s.compare("head_norm_forward rstd", t, shape, rstd.gpu, rstd.cpu);
        auto rstd2 = s.output({n, c.heads + c.kv_heads}, DType::F32);
        gpu::head_norm_forward(x.gpu, q.gpu, k.gpu, h, kv, x.gpu, rstd2.gpu, 1e-6f, Tensor(), 0);  // in place
        s.compare("head_norm_forward in place", t, shape, x.gpu, y.cpu);
      });
      // The backward against the CPU op, in place (dx is dy) too, and the gains' gradients bit for bit on a rerun.
      s.run("head_norm_backward", dtype_name(t), shape, [&] {
        auto x = s.make({c.b, c.t, w}, t, 233, 2.0f, 0.5f);
        auto q = s.make({c.d}, t, 234, 0.2f, 1.0f);
        auto k = s.make({c.d}, t, 235, 0.2f, 1.0f);
        auto dy = s.make({c.b, c.t, w}, t, 236);
        // rstd from the CPU forward, shared by both sides.
        Tensor y = Tensor::empty({c.b, c.t, w}, DType::F32, s.host(), "y");
        Tensor rstd = Tensor::empty({n, c.heads + c.kv_heads}, DType::F32, s.host(), "rstd");
        cpu::head_norm_forward(x.cpu, q.cpu, k.cpu, h, kv, y, rstd, 1e-6f, Tensor(), 0);
        Tensor rstd_g = s.upload(rstd, DType::F32);
        auto dx = s.output({c.b, c.t, w}, t);
        auto dq = s.make({c.d}, DType::F32, 237), dk = s.make({c.d}, DType::F32, 238);  // accumulate
        Tensor dq_again = Tensor::empty({c.d}, DType::F32, s.dev(), "dq copy");
        Tensor dk_again = Tensor::empty({c.d}, DType::F32, s.dev(), "dk copy");
        dq_again.copy_from(dq.gpu);
        dk_again.copy_from(dk.gpu);
        cpu::head_norm_backward(dy.cpu, x.cpu, q.cpu, k.cpu, h, kv, rstd, dx.cpu, dq.cpu, dk.cpu, Tensor(), 0);
        gpu::head_norm_backward(dy.gpu, x.gpu, q.gpu, k.gpu, h, kv, rstd_g, dx.gpu, dq.gpu, dk.gpu, Tensor(), 0);
        s.compare("head_norm_backward dx", t, shape, dx.gpu, dx.cpu);
        s.compare("head_norm_backward dq_gain", t, shape, dq.gpu, dq.cpu);
        s.compare("head_norm_backward dk_gain", t, shape, dk.gpu, dk.cpu);
        gpu::head_norm_backward(dy.gpu, x.gpu, q.gpu, k.gpu, h, kv, rstd_g, dy.gpu, dq_again, dk_again, Tensor(),
                                0);  // dx is dy
        s.compare("head_norm_backward in place", t, shape, dy.gpu, dx.cpu);
        const bool same = same_bits(dq.gpu, dq_again) && same_bits(dk.gpu, dk_again);
        s.row("head_norm_backward gains bitwise rerun", dtype_name(t), shape, same ? 0.0 : 1.0, gpu_check::kOpExact);
      });
    }
  }
  check_head_norm_whole(s);
}

// OLMoE's q and k under tp 2: one head each of D columns, the slot's half of a head of 2 D. The partial sums
// (head_norm_sums, of x^2 and of dy * gain * x) against the CPU's, and the forward and backward reading given sums
// (the CPU's, shared by both sides), at OLMoE-1B-7B's slot (8 heads of 128 of q and of k) on 2048 tokens.
void check_head_norm_whole(Suite& s) {
  const int64_t n = 2048, d = 1024, w = 3 * d;
  const std::string shape = dims({n, w}) + " D=" + std::to_string(d) + " of " + std::to_string(2 * d);
  for (DType t : kFloatTypes) {
    s.run("head_norm_sums", dtype_name(t), shape, [&] {
      auto x = s.make({n, w}, t, 240, 2.0f, 0.5f);
      auto dy = s.make({n, w}, t, 241);
      auto q = s.make({d}, t, 242, 0.2f, 1.0f);
      auto k = s.make({d}, t, 243, 0.2f, 1.0f);
      auto sq = s.output({n, 2}, DType::F32);
      auto gx = s.output({n, 2}, DType::F32);
      cpu::head_norm_sums(x.cpu, x.cpu, Tensor(), Tensor(), 1, 1, d, sq.cpu);
      gpu::head_norm_sums(x.gpu, x.gpu, Tensor(), Tensor(), 1, 1, d, sq.gpu);
      s.compare("head_norm_sums x^2", t, shape, sq.gpu, sq.cpu);
      cpu::head_norm_sums(dy.cpu, x.cpu, q.cpu, k.cpu, 1, 1, d, gx.cpu);
      gpu::head_norm_sums(dy.gpu, x.gpu, q.gpu, k.gpu, 1, 1, d, gx.gpu);
      s.compare("head_norm_sums dy gain x", t, shape, gx.gpu, gx.cpu);
      // Twice the slot's own sums stand for the other slot's: a head of 2 D whose halves are alike.
      Tensor whole_sq = Tensor::empty({n, 2}, DType::F32, s.host(), "sums");
      Tensor whole_gx = Tensor::empty({n, 2}, DType::F32, s.host(), "sums");
      for (int64_t i = 0; i < 2 * n; ++i) {
        whole_sq.f32()[i] = 2.0f * sq.cpu.f32()[i];
        whole_gx.f32()[i] = 2.0f * gx.cpu.f32()[i];
      }
      const Tensor sq_g = s.upload(whole_sq, DType::F32), gx_g = s.upload(whole_gx, DType::F32);
      auto y = s.output({n, w}, t);
      auto rstd = s.output({n, 2}, DType::F32);
      cpu::head_norm_forward(x.cpu, q.cpu, k.cpu, 1, 1, y.cpu, rstd.cpu, 1e-6f, whole_sq, 2 * d);
      gpu::head_norm_forward(x.gpu, q.gpu, k.gpu, 1, 1, y.gpu, rstd.gpu, 1e-6f, sq_g, 2 * d);
      s.compare("head_norm_forward whole y", t, shape, y.gpu, y.cpu);
      s.compare("head_norm_forward whole rstd", t, shape, rstd.gpu, rstd.cpu);
      const Tensor rstd_g = s.upload(rstd.cpu, DType::F32);
      auto dx = s.output({n, w}, t);
      auto dq = s.make({d}, DType::F32, 244), dk = s.make({d}, DType::F32, 245);  // accumulate
      cpu::head_norm_backward(dy.cpu, x.cpu, q.cpu, k.cpu, 1, 1, rstd.cpu, dx.cpu, dq.cpu, dk.cpu, whole_gx, 2 * d);
      gpu::head_norm_backward(dy.gpu, x.gpu, q.gpu, k.gpu, 1, 1, rstd_g, dx.gpu, dq.gpu, dk.gpu, gx_g, 2 * d);
      s.compare("head_norm_backward whole dx", t, shape, dx.gpu, dx.cpu);
      s.compare("head_norm_backward whole dq_gain", t, shape, dq.gpu, dq.cpu);
      s.compare("head_norm_backward whole dk_gain", t, shape, dk.gpu, dk.cpu);
    });
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

namespace {

// Documents (B, T) i32: three of ragged lengths in each sequence, cut at different places.
Suite::Pair documents(Suite& s, int64_t b, int64_t t) {
  std::vector<int32_t> v;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < t; ++i) v.push_back(static_cast<int32_t>(i >= t * (2 + bi) / 7) + (i >= t / 2 + bi + 1));
  Suite::Pair p{Tensor::empty({b, t}, DType::I32, s.host(), "cpu documents"),
                Tensor::empty({b, t}, DType::I32, s.dev(), "gpu documents")};
  std::memcpy(p.cpu.i32(), v.data(), v.size() * sizeof(int32_t));
  p.gpu.copy_from_host(v.data());
  return p;
}

// The flash kernels (attention_flash.h), 16-bit data only: attention kept inside documents (always theirs on CUDA);
// and causal attention at a shape whose cuDNN deterministic backward would want more than
// kCudnnAttentionWorkspaceLimit whole (B 1, H 4, T 16384: 2 GiB and a little), which the rule runs in blocks.
void check_attention_gqa_flash(Suite& s) {
  struct Case {
    int64_t b, t, h, kv, d;
    bool docs;
  };
  const std::vector<Case> cases = {{1, 7, 4, 2, 64, true},
                                   {2, 77, 4, 2, 128, true},
                                   {2, 300, 8, 2, 64, true},
                                   {1, 1024, 32, 8, 128, true},
                                   {1, 16384, 4, 2, 64, false}};
  for (DType t : {DType::BF16, DType::F16}) {
    for (const Case& c : cases) {
      const int64_t w = (c.h + 2 * c.kv) * c.d, cy = c.h * c.d;
      const int heads = static_cast<int>(c.h), kv = static_cast<int>(c.kv);
      const std::string shape =
          dims({c.b, c.t, c.h, c.d}) + " Hkv=" + std::to_string(c.kv) + (c.docs ? " flash" : " rule");
      const std::string fwd = c.docs ? "attention_gqa_documents_forward" : "attention_gqa_forward";
      const std::string bwd = c.docs ? "attention_gqa_documents_backward" : "attention_gqa_backward";
      s.run(fwd, dtype_name(t), shape, [&] {
        auto qkv = s.make({c.b, c.t, w}, t, 233);
        auto docs = documents(s, c.b, c.t);
        auto y = s.output({c.b, c.t, cy}, t);
        auto lse = s.output({c.b, c.h, c.t}, DType::F32);
        if (c.docs) {
          cpu::attention_gqa_documents_forward(qkv.cpu, heads, kv, docs.cpu, y.cpu, lse.cpu);
          gpu::attention_gqa_documents_forward(qkv.gpu, heads, kv, docs.gpu, y.gpu, lse.gpu);
        } else {
          cpu::attention_gqa_forward(qkv.cpu, heads, kv, y.cpu, lse.cpu, 0);
          gpu::attention_gqa_forward(qkv.gpu, heads, kv, y.gpu, lse.gpu, 0);
        }
        s.compare(fwd + " y", t, shape, y.gpu, y.cpu);
        s.compare(fwd + " lse", t, shape, lse.gpu, lse.cpu);
      });
      s.run(bwd, dtype_name(t), shape, [&] {
        auto qkv = s.make({c.b, c.t, w}, t, 234);
        auto dy = s.make({c.b, c.t, cy}, t, 235);
        auto docs = documents(s, c.b, c.t);
        Tensor y = Tensor::empty({c.b, c.t, cy}, DType::F32, s.host(), "y");
        Tensor lse = Tensor::empty({c.b, c.h, c.t}, DType::F32, s.host(), "lse");
        auto dqkv = s.output({c.b, c.t, w}, t);
        if (c.docs) {
          cpu::attention_gqa_documents_forward(qkv.cpu, heads, kv, docs.cpu, y, lse);
          cpu::attention_gqa_documents_backward(qkv.cpu, heads, kv, docs.cpu, y, lse, dy.cpu, dqkv.cpu);
        } else {
          cpu::attention_gqa_forward(qkv.cpu, heads, kv, y, lse, 0);
          cpu::attention_gqa_backward(qkv.cpu, heads, kv, y, lse, dy.cpu, dqkv.cpu, 0);
        }
        Tensor y_g = s.upload(y, t), lse_g = s.upload(lse, DType::F32);
        auto run = [&](const Tensor& out) {
          if (c.docs) {
            gpu::attention_gqa_documents_backward(qkv.gpu, heads, kv, docs.gpu, y_g, lse_g, dy.gpu, out);
          } else {
            gpu::attention_gqa_backward(qkv.gpu, heads, kv, y_g, lse_g, dy.gpu, out, 0);
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

// One backward row and its bitwise rerun: `backward(qkv, y, lse, dy, dqkv)` runs the GPU's from the CPU forward's y
// and lse, compared with the CPU's backward. `bwd` names the rows (--filter picks them by it).
template <class Backward>
void check_backward(Suite& s, DType t, const std::string& shape, int64_t b, int64_t seq, int64_t h, int64_t kv,
                    int64_t d, uint64_t seed, Backward&& backward, const std::string& bwd = "attention_gqa_backward") {
  const int64_t w = (h + 2 * kv) * d, cy = h * d;
  const int heads = static_cast<int>(h), kvh = static_cast<int>(kv);
  s.run(bwd, dtype_name(t), shape, [&] {
    auto qkv = s.make({b, seq, w}, t, seed);
    auto dy = s.make({b, seq, cy}, t, seed + 1);
    // The CPU forward's y and lse feed both backwards, so only the backward is compared.
    Tensor y = Tensor::empty({b, seq, cy}, DType::F32, s.host(), "y");
    Tensor lse = Tensor::empty({b, h, seq}, DType::F32, s.host(), "lse");
    cpu::attention_gqa_forward(qkv.cpu, heads, kvh, y, lse, 0);
    Tensor y_g = s.upload(y, t), lse_g = s.upload(lse, DType::F32);
    auto dqkv = s.output({b, seq, w}, t);
    cpu::attention_gqa_backward(qkv.cpu, heads, kvh, y, lse, dy.cpu, dqkv.cpu, 0);
    backward(qkv.gpu, y_g, lse_g, dy.gpu, dqkv.gpu);
    s.compare(bwd + " dqkv", t, shape, dqkv.gpu, dqkv.cpu);
    Tensor again = Tensor::empty(dqkv.gpu.shape(), t, s.dev(), "dqkv again");
    s.poison(again);
    backward(qkv.gpu, y_g, lse_g, dy.gpu, again);
    s.row(bwd + " bitwise rerun", dtype_name(t), shape, same_bits(dqkv.gpu, again) ? 0.0 : 1.0, gpu_check::kOpExact);
  });
}

// cuDNN's deterministic backward in blocks of query rows (attention_blocks.h), which the rule runs past
// kCudnnAttentionWorkspaceLimit (scratch_sizes.h), forced here at small sizes: several blocks, a short last block, GQA
// and multi-head attention, D 64 and 128, the heads whole and in groups (two batch elements, one kv head a group),
// the whole-height blocks split in two (their rows against the keys before them, and their diagonal square) or not;
// the same bits twice.
void check_attention_gqa_blocks(Suite& s) {
  struct Case {
    int64_t b, t, h, kv, d, rows, groups;
  };
  const std::vector<Case> cases = {{2, 1000, 8, 2, 64, 256, 1},   {1, 777, 4, 4, 128, 128, 1},
                                   {1, 2048, 32, 8, 128, 512, 1}, {1, 777, 4, 4, 128, 128, 4},
                                   {2, 1000, 8, 2, 64, 256, 2},   {1, 2048, 32, 8, 128, 1024, 4}};
  for (DType t : {DType::BF16, DType::F16}) {
    for (const Case& c : cases) {
      for (const bool split : {false, true}) {
        const int heads = static_cast<int>(c.h), kv = static_cast<int>(c.kv);
        const std::string shape = dims({c.b, c.t, c.h, c.d}) + " Hkv=" + std::to_string(c.kv) + " blocks " +
                                  std::to_string(c.rows) +
                                  (c.groups > 1 ? " heads in " + std::to_string(c.groups) : "");
        check_backward(
            s, t, shape, c.b, c.t, c.h, c.kv, c.d, 236,
            [&](const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& out) {
              TANDEM_CHECK(
                  gpu::attention_gqa_backward_in_blocks(qkv, heads, kv, y, lse, dy, out, c.rows, c.groups, split),
                  "cuDNN cannot run the blocks");
            },
            std::string(c.groups > 1 ? "attention_gqa_backward_blocks_groups" : "attention_gqa_backward_blocks") +
                (split ? "_split" : ""));
      }
    }
  }
}

}  // namespace

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
        const std::string fwd = "attention_gqa_forward";
        s.run(fwd, dtype_name(t), shape, [&] {
          auto qkv = s.make({c.b, c.t, w}, t, 230);
          auto y = s.output({c.b, c.t, cy}, t);
          auto lse = s.output({c.b, c.h, c.t}, DType::F32);
          cpu::attention_gqa_forward(qkv.cpu, heads, kv, y.cpu, lse.cpu, 0);
          if (plain) {
            gpu::attention_gqa_forward_plain(qkv.gpu, heads, kv, y.gpu, lse.gpu);
          } else {
            gpu::attention_gqa_forward(qkv.gpu, heads, kv, y.gpu, lse.gpu, 0);
          }
          s.compare(fwd + " y", t, shape, y.gpu, y.cpu);
          s.compare(fwd + " lse", t, shape, lse.gpu, lse.cpu);
        });
        check_backward(s, t, shape, c.b, c.t, c.h, c.kv, c.d, 231,
                       [&](const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& out) {
                         if (plain) {
                           gpu::attention_gqa_backward_plain(qkv, heads, kv, y, lse, dy, out);
                         } else {
                           gpu::attention_gqa_backward(qkv, heads, kv, y, lse, dy, out, 0);
                         }
                       });
      }
    }
  }
  check_attention_gqa_flash(s);
  check_attention_gqa_blocks(s);
}

}  // namespace tandem::ops_check
