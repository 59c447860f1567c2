#include "tandem/plan/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "tandem/device/cpu_device.h"
#include "tandem/ops/ops.h"

namespace tandem::plan {

namespace {

// The best of `reps` timed runs of `fn`, after one untimed warm-up: the rate a long run settles at.
template <class Fn>
double best_seconds(int reps, Fn fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

std::string line(const char* what, double value, const char* unit) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-34s %10.3g %s\n", what, value, unit);
  return buf;
}

}  // namespace

Calibration calibrate(const Rates& base, comm::Communicator* world) {
  Calibration c;
  c.rates = base;
  c.rates.name = base.name == "cpu" ? "cpu (calibrated)" : base.name;
  c.rates.device = "cpu";
  device::CpuDevice dev;
  std::ostringstream os;

  {  // (1024 x 1024) @ (1024 x 1024): 2 n^3 FLOPs
    const int64_t n = 1024;
    Tensor a = Tensor::zeros({n, n}, DType::F32, dev, "calibrate a");
    Tensor b = Tensor::zeros({n, n}, DType::F32, dev, "calibrate b");
    Tensor out = Tensor::empty({n, n}, DType::F32, dev, "calibrate c");
    const double s = best_seconds(3, [&] { ops::matmul(a, b, out, false, false); });
    c.rates.gemm_flops_fp32 = 2.0 * n * n * n / s;
    // The CPU ops widen 16-bit operands to fp32 for OpenBLAS: the same rate, plus the copies.
    c.rates.gemm_flops = c.rates.gemm_flops_fp32;
    c.rates.gemm_flops_fp8 = c.rates.gemm_flops_fp32;  // the CPU's FP8 product is an fp32 one
    c.rates.grouped_flops = c.rates.gemm_flops_fp32;   // the CPU's grouped products are its products, one a group
    // Attention runs through the same matmul on the CPU, both ways.
    c.rates.attention_forward_flops = c.rates.attention_backward_flops = c.rates.gemm_flops_fp32;
    os << line("GEMM 1024^3 (fp32, ops::matmul)", c.rates.gemm_flops_fp32 / 1e9, "GFLOP/s");
  }
  {  // a 256 MiB copy reads and writes every byte
    const int64_t n = int64_t{64} << 20;
    Tensor src = Tensor::zeros({n}, DType::F32, dev, "calibrate src");
    Tensor dst = Tensor::zeros({n}, DType::F32, dev, "calibrate dst");
    const double s = best_seconds(3, [&] { dst.copy_from(src); });
    c.rates.memory_bw = 2.0 * static_cast<double>(src.nbytes()) / s;
    os << line("memory (256 MiB copy, read + write)", c.rates.memory_bw / 1e9, "GB/s");
  }
  if (world && world->size() > 1) {
    const int n = world->size();
    // Every process measured its share of the host at once: the mean is what one device of this job gets.
    c.rates.gemm_flops_fp32 = world->all_reduce_scalar(c.rates.gemm_flops_fp32) / n;
    c.rates.gemm_flops = c.rates.gemm_flops_fp32;
    c.rates.gemm_flops_fp8 = c.rates.gemm_flops_fp32;
    c.rates.grouped_flops = c.rates.gemm_flops_fp32;
    c.rates.attention_forward_flops = c.rates.attention_backward_flops = c.rates.gemm_flops_fp32;
    c.rates.memory_bw = world->all_reduce_scalar(c.rates.memory_bw) / n;
    Tensor big = Tensor::zeros({int64_t{4} << 20}, DType::F32, dev, "calibrate all-reduce");  // 16 MiB
    const double ar = best_seconds(3, [&] { world->all_reduce(big); });
    const double bus = 2.0 * (n - 1) / n * static_cast<double>(big.nbytes()) / ar;
    Tensor one = Tensor::zeros({1}, DType::F32, dev, "calibrate latency");
    const double lat = best_seconds(20, [&] { world->all_reduce(one); });
    // Rank 0 sends to rank 1; the others wait at the barrier.
    const double p2p_s = best_seconds(3, [&] {
      if (world->rank() == 0) world->send(big, 1, 7);
      if (world->rank() == 1) world->recv(big, 0, 7);
      world->barrier();
    });
    // Every rank reports the slowest rank's view, so the file is the same whichever rank writes it.
    const double bus_all = world->all_reduce_scalar(bus, comm::ReduceOp::Sum) / n;
    const double lat_all = world->all_reduce_scalar(lat, comm::ReduceOp::Max);
    const double p2p = static_cast<double>(big.nbytes()) / world->all_reduce_scalar(p2p_s, comm::ReduceOp::Max);
    c.rates.tp_bus_bw = c.rates.dp_bus_bw = bus_all;
    c.rates.pp_p2p_bw = p2p;
    c.rates.latency_s = lat_all;
    os << line("GEMM, mean over the processes", c.rates.gemm_flops_fp32 / 1e9, "GFLOP/s");
    os << line("memory, mean over the processes", c.rates.memory_bw / 1e9, "GB/s");
    os << line("all-reduce 16 MiB, bus bandwidth", bus_all / 1e9, "GB/s");
    os << line("send 16 MiB rank 0 -> 1", p2p / 1e9, "GB/s");
    os << line("all-reduce of one float (latency)", lat_all * 1e6, "us");
  } else {
    os << "  collectives: not measured (one process; run under mpirun -n 2 or more to measure them)\n";
  }
  c.report = os.str();
  return c;
}

}  // namespace tandem::plan
