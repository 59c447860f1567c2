// host_adamw_bench: the offloaded optimizer's host AdamW against the host's memory bandwidth, in one run. A
// STREAM-like copy (a[i] = b[i], all threads) gives the bandwidth; the AdamW op (ops/cpu/adamw.cc) over the same
// number of parameters gives its rate, in parameters per second and in bytes moved (28 a parameter: the weight,
// both moments and the gradient read, three of them written). Prints both and the ratio, and the update with the bf16
// values the device gets from it, written by a cast after it and in the same pass.
//   host_adamw_bench [--params N] [--iters K]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tandem/device/cpu_device.h"
#include "tandem/ops/ops.h"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The best of `iters` timed runs after one untimed (first-touch, page faults).
template <class Fn>
double best_seconds(int iters, Fn fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

int run(int argc, char** argv) {
  int64_t n = int64_t{1} << 27;  // 134M parameters: 2 GiB of state, far past any cache
  int iters = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--params")
      n = std::atoll(argv[i + 1]);
    else if (key == "--iters")
      iters = std::atoi(argv[i + 1]);
    else
      TANDEM_FAIL("unknown option ", key, "; use --params N --iters K");
  }
  device::CpuDevice host;
  Tensor w = Tensor::empty({n}, DType::F32, host, "weights"), g = Tensor::empty({n}, DType::F32, host, "gradients");
  Tensor m = Tensor::zeros({n}, DType::F32, host, "exp_avg"), v = Tensor::zeros({n}, DType::F32, host, "exp_avg_sq");
  float *pw = w.f32(), *pg = g.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {  // first touch by the threads that use them
    pw[i] = 0.01f * static_cast<float>(i % 1000);
    pg[i] = 1e-3f * static_cast<float>((i * 7) % 1000 - 500);
  }
  const double copy_s = best_seconds(iters, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pg[i] = pw[i];
  });
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) pg[i] = 1e-3f * static_cast<float>((i * 7) % 1000 - 500);
  ops::AdamWParams p;
  p.weight_decay = 0.1f;
  const double adamw_s = best_seconds(iters, [&] {
    ops::adamw_step(w, g, m, v, p);
    ++p.step;
  });
  // The offloaded update as it was before the rounding joined the AdamW pass (the update, then a cast to bf16 for the
  // device), and as it is (one pass writing both), on the same buffers.
  Tensor values = Tensor::empty({n}, DType::BF16, host, "bf16 values");
  const double two_pass_s = best_seconds(iters, [&] {
    ops::adamw_step(w, g, m, v, p);
    ops::cast(w, values);
    ++p.step;
  });
  const double fused_s = best_seconds(iters, [&] {
    ops::adamw_step(w, g, m, v, p, values);
    ++p.step;
  });
  const double copy_bw = 8.0 * static_cast<double>(n) / copy_s;  // 4 bytes read and 4 written each
  const double adamw_rate = static_cast<double>(n) / adamw_s;
  std::printf("threads %d, %lld parameters\n", omp_get_max_threads(), static_cast<long long>(n));
  std::printf("host copy: %.1f GB/s (read + write)\n", copy_bw / 1e9);
  std::printf("host AdamW: %.3f Gparam/s, %.1f GB/s (28 B a parameter), %.0f%% of the copy's bandwidth\n",
              adamw_rate / 1e9, 28.0 * adamw_rate / 1e9, 100.0 * 28.0 * adamw_rate / copy_bw);
  std::printf("host AdamW and bf16 values for the device: %.3f Gparam/s as two passes, %.3f Gparam/s in one (%.2fx)\n",
              static_cast<double>(n) / two_pass_s / 1e9, static_cast<double>(n) / fused_s / 1e9, two_pass_s / fused_s);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  try {
    return tandem::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
