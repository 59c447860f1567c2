// ops_check: timings of the main ops on the GPU, and cuDNN attention's workspace at the benches' shapes.
#include "ops_check.h"

namespace tandem::ops_check {

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
    const double f = median_ms(dev, [&] { gpu::attention_gqa_forward(qkv, H, H, y, lse, 0); });
    print("attention bf16 fwd (B=8 T=1024 H=25 D=64)", f, flops, "TFLOP/s");
    const double b = median_ms(dev, [&] { gpu::attention_gqa_backward(qkv, H, H, y, lse, dy, dqkv, 0); });
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
    const double ms = median_ms(dev, [&] { gpu::adamw_step(p, g, m, v, ops::AdamWParams{}, Tensor()); });
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
    const double af = median_ms(dev, [&] { gpu::attention_gqa_forward(qkv, H, KV, y, lse, 0); });
    print("attention_gqa bf16 fwd" + what, af, flops, "TFLOP/s");
    const double ab = median_ms(dev, [&] { gpu::attention_gqa_backward(qkv, H, KV, y, lse, dy, dqkv, 0); });
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
                static_cast<long long>(gpu::attention_gqa_cudnn_workspace_bytes(&dev, qkv, h, kv, false, 0)),
                static_cast<long long>(gpu::attention_gqa_cudnn_workspace_bytes(&dev, qkv, h, kv, true, 0)));
  }
}

}  // namespace tandem::ops_check
