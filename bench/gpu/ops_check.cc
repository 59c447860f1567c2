// ops_check: every CUDA op against the CPU op on the same inputs, for each dtype, then timings of the main ops.
// Inputs are Philox normals rounded to the dtype under test, so both sides see identical values; the CPU runs in f32.
// CUDA outputs are poisoned first (bytes 0xFF: NaN in f32, bf16 and f16), so an element the op forgot to write
// fails the check. The error is ||gpu - cpu|| / ||cpu|| over all elements, against the bound of tolerances.h
// for the dtype (f32, bf16, f16), for sum_squares, or exact. ctest runs it as the test cuda_ops_check (label gpu).
// Usage: ops_check [--no-bench] [--family NAME] [--filter=<substring of the op name>]. Exit status 1 when any row
//        fails. --family (or --family=NAME) runs one family's checks and its timings (fp8: the FP8 ops and linear
//        layer, timed by bench_fp8; attention_gqa: the main timings and the long-attention table; moe: the main
//        timings and the experts' grouped products on both CUDA paths, bench_moe; any other family: the main
//        timings); --filter keeps the checks whose op name holds the substring.
//        ops_check --print-tolerances: the table of tolerances.h, one "name bound" a line (needs no GPU).
#include "ops_check.h"

#include <omp.h>

#include <cstdio>
#include <string>

namespace tandem::ops_check {
namespace {

// The families of checks, in the order they run.
struct Family {
  const char* name;
  void (*check)(Suite&);
};
constexpr Family kFamilies[] = {{"matmul", check_matmul},
                                {"linear", check_linear},
                                {"elementwise", check_elementwise},
                                {"layernorm", check_layernorm},
                                {"embedding", check_embedding},
                                {"cross_entropy", check_cross_entropy},
                                {"reduce_and_adamw", check_reduce_and_adamw},
                                {"deferred_errors", check_deferred_errors},
                                {"rmsnorm", check_rmsnorm},
                                {"head_norm", check_head_norm},
                                {"rotary", check_rotary},
                                {"swiglu", check_swiglu},
                                {"attention_gqa", check_attention_gqa},
                                {"attention_pair", check_attention_pair},
                                {"fp8", check_fp8},
                                {"moe", check_moe}};

int usage() {
  std::string names;
  for (const Family& f : kFamilies) names += std::string(names.empty() ? "" : "|") + f.name;
  std::fprintf(stderr,
               "usage: ops_check [--no-bench] [--family %s] [--filter=<op substring>] | ops_check "
               "--print-tolerances\n",
               names.c_str());
  return 2;
}

int run(int argc, char** argv) {
  bool do_bench = true;
  std::string filter, family;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-bench") {
      do_bench = false;
    } else if (arg.rfind("--filter=", 0) == 0) {
      filter = arg.substr(9);
    } else if (arg.rfind("--family=", 0) == 0) {
      family = arg.substr(9);
    } else if (arg == "--family" && i + 1 < argc) {
      family = argv[++i];
    } else if (arg == "--print-tolerances" && argc == 2) {
      for (const gpu_check::Tolerance& t : gpu_check::kTolerances) std::printf("%s %g  %s\n", t.name, t.bound, t.why);
      return 0;
    } else {
      return usage();
    }
  }
  bool known = family.empty();
  for (const Family& f : kFamilies) known = known || family == f.name;
  if (!known) return usage();
  CpuDevice host;
  CudaDevice dev(0);
  std::printf("ops_check on %s (%s, %d SMs), CPU reference with %d OpenMP threads\n\n", dev.name().c_str(),
              dev.gpu_name().c_str(), dev.sm_count(), omp_get_max_threads());
  std::printf("%-34s %-10s %-26s %11s %9s  %s\n", "op", "dtype", "shape", "rel error", "bound", "result");
  Suite s(host, dev, filter);
  for (const Family& f : kFamilies)
    if (family.empty() || family == f.name) f.check(s);
  dev.synchronize();
  const device::ArenaStats a = dev.arena_stats();
  std::printf("\narena: %s reserved in %zu block(s), %s in use, peak live %s\n", format_bytes(a.reserved_bytes).c_str(),
              a.blocks, format_bytes(a.used_bytes).c_str(), format_bytes(dev.peak_bytes()).c_str());
  std::printf("%s: %d failing row(s)\n", s.failures() ? "FAIL" : "PASS", s.failures());
  if (do_bench && family != "fp8") bench(dev);
  if (do_bench && (family.empty() || family == "attention_gqa")) bench_long_attention(dev);
  if (do_bench && (family.empty() || family == "fp8")) bench_fp8(dev);
  if (do_bench && (family.empty() || family == "moe")) bench_moe(dev);
  return s.failures() ? 1 : 0;
}

}  // namespace
}  // namespace tandem::ops_check

int main(int argc, char** argv) {
  try {
    return tandem::ops_check::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ops_check: %s\n", e.what());
    return 1;
  }
}