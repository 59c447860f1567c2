// ops_check: causal grouped-query attention on the Llama-3-8B shape (H 32, Hkv 8, D 128, bf16) from 2k to 128k
// tokens, through the dispatch (scratch_sizes.h: cuDNN's graphs whole, its deterministic backward in blocks of query
// rows past kCudnnAttentionWorkspaceLimit, or the flash kernels), with TFLOP/s forward and backward, the backward's
// scratch as cuDNN gives it and as the planner estimates it, and the first call's time (its graphs are built then).
// At 128k the flash kernels beside (attention kept inside one document: theirs), the ops with the blocks the preflight
// chooses where the plan has room, and the deterministic backward in blocks of other heights than the rule's, its heads
// whole or in groups, its whole-height blocks split in two or not.
#include <cudnn.h>

#include <chrono>

#include "ops_check.h"
#include "tandem/ops/cuda/attention_blocks.h"
#include "tandem/ops/cuda/scratch_sizes.h"

namespace tandem::ops_check {
namespace {

constexpr int64_t kH = 32, kKv = 8, kD = 128;

struct Buffers {
  Tensor qkv, y, lse, dy, dqkv, docs;
  Buffers(CudaDevice& dev, int64_t b, int64_t t) {
    const DType bf = DType::BF16;
    const int64_t kW = (kH + 2 * kKv) * kD;
    Tensor f = Tensor::empty({b, t, kW}, DType::F32, dev, "draws");
    gpu::random_fill(f, RandomFill{RandomKind::Normal, 1.0f, 7, 0, 0, {}});
    qkv = Tensor::empty({b, t, kW}, bf, dev, "qkv");
    gpu::cast(f, qkv);
    y = Tensor::empty({b, t, kH * kD}, bf, dev, "y");
    dy = Tensor::empty({b, t, kH * kD}, bf, dev, "dy");
    gpu::fill(dy, 0.01f);
    lse = Tensor::empty({b, kH, t}, DType::F32, dev, "lse");
    dqkv = Tensor::empty({b, t, kW}, bf, dev, "dqkv");
    docs = Tensor::zeros({b, t}, DType::I32, dev, "documents");
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void bench_long_attention(CudaDevice& dev) {
  std::printf("\nlong attention, bf16, H %lld, Hkv %lld, D %lld, causal; cuDNN %zu (median of the timed runs)\n",
              static_cast<long long>(kH), static_cast<long long>(kKv), static_cast<long long>(kD), cudnnGetVersion());
  std::printf("%-3s %-7s %-12s %-9s %-8s %-9s %-8s %-11s %-11s %s\n", "B", "T", "backward", "fwd ms", "TFLOP/s",
              "bwd ms", "TFLOP/s", "scratch", "estimate", "first call s");
  struct Shape {
    int64_t b, t;
  };
  for (const Shape sh : {Shape{16, 2048}, Shape{1, 8192}, Shape{1, 32768}, Shape{1, 131072}}) {
    Buffers x(dev, sh.b, sh.t);
    const double flops = 2.0 * sh.b * sh.t * sh.t * kH * kD;  // causal: half of 4 B T^2 H D
    const int reps = sh.t >= 131072 ? 4 : 10;
    const auto t0 = std::chrono::steady_clock::now();
    gpu::attention_gqa_forward(x.qkv, kH, kKv, x.y, x.lse, 0);
    gpu::attention_gqa_backward(x.qkv, kH, kKv, x.y, x.lse, x.dy, x.dqkv, 0);
    dev.synchronize();
    const double first = seconds_since(t0);
    const double f = median_ms(
        dev, [&] { gpu::attention_gqa_forward(x.qkv, kH, kKv, x.y, x.lse, 0); }, 1, reps);
    const double b = median_ms(
        dev, [&] { gpu::attention_gqa_backward(x.qkv, kH, kKv, x.y, x.lse, x.dy, x.dqkv, 0); }, 1, reps);
    const int64_t rows =
        gpu::attention_uses_flash(DType::BF16, sh.b, kH, kKv, sh.t, kD, false, 0)
            ? 0
            : gpu::cudnn_attention_block_rows(sh.b, kH, kKv, sh.t, kD, gpu::kCudnnAttentionBlockDpLimit);
    const std::string path = rows == 0      ? "flash"
                             : rows == sh.t ? "cuDNN whole"
                                            : std::to_string(gpu::cudnn_attention_blocks(rows, sh.t)) + " blocks";
    const int64_t asked = gpu::attention_gqa_cudnn_workspace_bytes(&dev, x.qkv, kH, kKv, true, 0);
    const int64_t estimate = gpu::attention_cudnn_workspace_estimate(DType::BF16, sh.b, kH, kKv, sh.t, kD, true, 0);
    std::printf("%-3lld %-7lld %-12s %-9.2f %-8.1f %-9.2f %-8.1f %-11lld %-11lld %.1f\n", static_cast<long long>(sh.b),
                static_cast<long long>(sh.t), path.c_str(), f, flops / (f * 1e9), b, 2.5 * flops / (b * 1e9),
                static_cast<long long>(asked), static_cast<long long>(estimate), first);
    std::fflush(stdout);
    if (sh.t != 131072) continue;
    // The flash kernels beside (B H T f32 scratch).
    gpu::attention_gqa_documents_forward(x.qkv, kH, kKv, x.docs, x.y, x.lse);
    const double ff = median_ms(
        dev, [&] { gpu::attention_gqa_documents_forward(x.qkv, kH, kKv, x.docs, x.y, x.lse); }, 1, reps);
    const double fb = median_ms(
        dev, [&] { gpu::attention_gqa_documents_backward(x.qkv, kH, kKv, x.docs, x.y, x.lse, x.dy, x.dqkv); }, 1, reps);
    std::printf("  flash kernels: fwd %9.2f ms %7.1f TFLOP/s, bwd %9.2f ms %7.1f TFLOP/s\n", ff, flops / (ff * 1e9), fb,
                2.5 * flops / (fb * 1e9));
    // The ops with the bytes the preflight gives the blocks where the plan has room (tiles.attention_block_bytes),
    // and the scratch cuDNN gives for them beside the planner's estimate.
    const int64_t roomy = gpu::kCudnnAttentionBlockDpRoomy;
    gpu::attention_gqa_forward(x.qkv, kH, kKv, x.y, x.lse, roomy);
    const double rb = median_ms(
        dev, [&] { gpu::attention_gqa_backward(x.qkv, kH, kKv, x.y, x.lse, x.dy, x.dqkv, roomy); }, 1, reps);
    std::printf("  the ops with %lld GiB blocks: bwd %9.2f ms %7.1f TFLOP/s, scratch %lld, estimate %lld\n",
                static_cast<long long>(roomy >> 30), rb, 2.5 * flops / (rb * 1e9),
                static_cast<long long>(gpu::attention_gqa_cudnn_workspace_bytes(&dev, x.qkv, kH, kKv, true, roomy)),
                static_cast<long long>(
                    gpu::attention_cudnn_workspace_estimate(DType::BF16, sh.b, kH, kKv, sh.t, kD, true, roomy)));
    // The deterministic backward in blocks of other shapes than the rule's: heights, and the heads whole or in groups
    // (each block's graph over H / groups query heads in turn), with the scratch each holds.
    struct Blocking {
      int64_t groups, rows;
    };
    for (const Blocking k : {Blocking{1, 512}, Blocking{4, 2048}, Blocking{4, 4096}, Blocking{8, 4096},
                             Blocking{8, 8192}, Blocking{8, 16384}, Blocking{8, 32768}}) {
      for (const bool split : {false, true}) {
        const int64_t gh = kH / k.groups, gkv = kKv / k.groups;
        const int64_t scratch =
            gpu::cudnn_attention_blocked_scratch(gpu::cudnn_attention_block_workspace(sh.b, gh, gkv, k.rows, sh.t, kD),
                                                 k.rows, sh.b, kH, kKv, sh.t, kD, split);
        const double rb = median_ms(
            dev,
            [&] {
              TANDEM_CHECK(gpu::attention_gqa_backward_in_blocks(x.qkv, kH, kKv, x.y, x.lse, x.dy, x.dqkv, k.rows,
                                                                 k.groups, split),
                           "blocks of ", k.rows, " rows, heads in ", k.groups);
            },
            1, reps);
        std::printf("  heads in %lld groups, blocks of %5lld rows%s: bwd %9.2f ms %7.1f TFLOP/s, scratch %lld bytes\n",
                    static_cast<long long>(k.groups), static_cast<long long>(k.rows), split ? ", split" : "", rb,
                    2.5 * flops / (rb * 1e9), static_cast<long long>(scratch));
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace tandem::ops_check
