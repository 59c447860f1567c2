// CountingDevice: a device that holds no memory and runs no kernel. It hands out addresses that are never read,
// accounts every allocation by purpose as any AccountedDevice does, and keeps a WorkLog that the counting backend
// of the op set (ops/counting.cc) and the stand-in communicators (comm/stand_in.h) write as the engine runs: the
// planner runs the real engine on it to learn each device's peak memory and the work of a step.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "tandem/device/accounted_device.h"

namespace tandem::device {

// The group axis a collective runs on (the communicators' names: "tp", "pp", "dp", "cp", anything else is World).
enum class CommAxis { Tp, Pp, Dp, World, Cp };
inline constexpr int kCommAxes = 5;

// The work a run would do, accumulated as it is recorded. Subtracting two snapshots gives the work in between.
struct WorkLog {
  double gemm_flops = 0;       // matrix products with 16-bit operands
  double gemm_flops_fp32 = 0;  // matrix products with fp32 operands
  double gemm_flops_fp8 = 0;   // matrix products with FP8 operands (e4m3, e5m2)
  double grouped_flops = 0;    // a mixture of experts' grouped products with 16-bit operands (many small products)
  double attention_flops = 0;  // fused causal attention, forward and backward
  // Of attention_flops: the backward's, and both weighted by head dim for the GPU's rates (ops::add_attention).
  double attention_backward_flops = 0;
  double attention_weighted_flops = 0;
  double attention_weighted_backward_flops = 0;
  double bytes = 0;  // bytes read and written by every other op (elementwise, norms, the loss, AdamW)
  double ops = 0;    // kernel calls
  // Per axis: collectives and messages, and their bus bytes (NCCL's convention: an all-reduce of S bytes over n
  // ranks moves 2 (n-1)/n S, a reduce-scatter or all-gather of S bytes in all (n-1)/n S, a message its bytes).
  std::array<double, kCommAxes> comm_calls{};
  std::array<double, kCommAxes> comm_bus_bytes{};
  // Asynchronous copies between the device and host memory (offload), by direction.
  double to_host_bytes = 0;
  double from_host_bytes = 0;

  WorkLog& operator+=(const WorkLog& o);
  WorkLog& operator-=(const WorkLog& o);
  friend WorkLog operator+(WorkLog a, const WorkLog& b) { return a += b; }
  friend WorkLog operator-(WorkLog a, const WorkLog& b) { return a -= b; }
  WorkLog& operator*=(double k);
  bool operator==(const WorkLog&) const = default;
};

class CountingDevice final : public AccountedDevice {
 public:
  // `planned`: the kind of device whose kernels' scratch the counting ops allocate (Cpu or Cuda);
  // `cpu_threads`: the OpenMP threads a planned CPU process runs (the CPU attention's scratch is per thread).
  explicit CountingDevice(DeviceKind planned, int cpu_threads = 1, int index = 0);

  DeviceKind kind() const override { return DeviceKind::Counting; }
  std::string name() const override { return "counting:" + std::to_string(index_); }
  DeviceKind planned() const { return planned_; }
  int cpu_threads() const { return cpu_threads_; }
  // The real device this one stands for, when the planning process has it (null otherwise): kernels whose scratch
  // only their library can tell (cuDNN's attention workspace) are asked there.
  void set_planned_device(Device* device) { planned_device_ = device; }
  Device* planned_device() const { return planned_device_; }

  // Nothing is stored: moves do nothing, and reads give zeros.
  void fill_zero(void*, size_t) override {}
  void copy(void*, const void*, size_t) override {}
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_from_host(void*, const void*, size_t) override {}
  // Counted, not done: the host side may be a counting host's address, which holds nothing either.
  uint64_t copy_to_host_async(void*, const void*, size_t bytes, uint64_t) override;
  uint64_t copy_from_host_async(void*, const void*, size_t bytes, uint64_t) override;
  // A counting host (planned CPU) that shares this device's OpenMP threads.
  std::unique_ptr<AccountedDevice> host_memory(bool page_locked) const override;

  WorkLog& work() { return work_; }
  const WorkLog& work() const { return work_; }
  // Chunk calls accounted from a probed effect instead of run (plan/chunk_replay.h).
  void count_replay() { ++replays_; }
  int64_t replays() const { return replays_; }
  // True the first time it is asked: the planned backend's fixed workspaces are taken then, and kept.
  bool take_fixed_once() { return !std::exchange(fixed_taken_, true); }

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_release(void*) override {}

 private:
  DeviceKind planned_;
  Device* planned_device_ = nullptr;
  int cpu_threads_;
  int index_;
  uintptr_t next_;  // the next address handed out: distinct, aligned ranges, so overlap checks still work
  WorkLog work_;
  bool fixed_taken_ = false;
  int64_t replays_ = 0;
};

// The CountingDevice behind `device`, or null when it is another kind.
CountingDevice* as_counting(Device& device);

}  // namespace tandem::device
