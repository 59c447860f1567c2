// The rule that picks the CUDA path of the experts' grouped products (ops/cuda/grouped_path.h), which the op's
// dispatch and the planner's scratch both follow: the one cuBLAS grouped call unless the per-expert loop is asked for
// (TANDEM_GROUPED_GEMM=loop), and then only where cuBLAS takes the operands (one dtype throughout, every matrix
// pointer 16-byte aligned) and some group has rows; the call's scratch is its three pointer arrays. Plain C++: it
// runs without a GPU (the GPU side is bench/gpu/ops_check's moe rows).
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>

#include "tandem/device/counting_device.h"
#include "tandem/device/cpu_device.h"
#include "tandem/ops/backend.h"
#include "tandem/ops/cuda/grouped_path.h"
#include "tandem/ops/ops.h"

namespace tandem::ops::cuda {
namespace {

using device::CpuDevice;
constexpr GroupedPath kLoop = GroupedPath::Loop, kOne = GroupedPath::OneCall;

const std::vector<int64_t> kRows = {5, 0, 1, 3};  // 9 routed rows, one group empty

struct Matmul {
  Tensor a, b, c;
  GroupedPath path(GroupedPath asked, const std::vector<int64_t>& rows = kRows) const {
    return grouped_path(grouped_matmul_operands(a, b, c), b.dim(1), b.dim(2), rows, asked);
  }
};

// a (9, K), b (4, N, K), c (9, N).
Matmul matmul(Device& dev, DType in, DType out, int64_t n, int64_t k) {
  return {Tensor::empty({9, k}, in, dev, "a"), Tensor::empty({4, n, k}, in, dev, "b"),
          Tensor::empty({9, n}, out, dev, "c")};
}

TEST(GroupedRule, TheOneCallUnlessTheLoopIsAskedFor) {
  CpuDevice dev;
  const Matmul m = matmul(dev, DType::BF16, DType::BF16, 48, 64);
  EXPECT_EQ(m.path(kLoop), kLoop);
  EXPECT_EQ(m.path(kOne), kOne);
  if (std::getenv("TANDEM_GROUPED_GEMM") == nullptr) {
    EXPECT_EQ(kGroupedPathDefault, kOne);  // measured faster on a GPU (grouped_path.h)
    EXPECT_EQ(grouped_path_asked(), kOne);
    EXPECT_EQ(grouped_path(grouped_matmul_operands(m.a, m.b, m.c), 48, 64, kRows), kOne);
  }
}

TEST(GroupedRule, TheOneCallTakesOneDtypeThroughout) {
  CpuDevice dev;
  for (const DType t : {DType::F32, DType::BF16, DType::F16}) EXPECT_EQ(matmul(dev, t, t, 48, 64).path(kOne), kOne);
  // cuBLAS's grouped call has no f32 output for 16-bit inputs: c or dw in f32 stays on the loop.
  EXPECT_EQ(matmul(dev, DType::BF16, DType::F32, 48, 64).path(kOne), kLoop);
  const Tensor dy = Tensor::empty({9, 48}, DType::BF16, dev, "dy"), x = Tensor::empty({9, 64}, DType::BF16, dev, "x");
  const Tensor dw32 = Tensor::empty({4, 48, 64}, DType::F32, dev, "dw");
  const Tensor dw16 = Tensor::empty({4, 48, 64}, DType::BF16, dev, "dw");
  EXPECT_EQ(grouped_path(grouped_weight_grad_operands(dy, x, dw32), 48, 64, kRows, kOne), kLoop);
  EXPECT_EQ(grouped_path(grouped_weight_grad_operands(dy, x, dw16), 48, 64, kRows, kOne), kOne);
}

TEST(GroupedRule, EveryPointerOnTheSixteenByteGrid) {
  CpuDevice dev;
  // Rows of 4 bf16 (8 bytes): a group's rows may begin off the grid.
  EXPECT_EQ(matmul(dev, DType::BF16, DType::BF16, 48, 4).path(kOne), kLoop);
  EXPECT_EQ(matmul(dev, DType::BF16, DType::BF16, 4, 64).path(kOne), kLoop);
  // Rows of 8 bf16 are 16 bytes: on the grid.
  EXPECT_EQ(matmul(dev, DType::BF16, DType::BF16, 8, 8).path(kOne), kOne);
  // A view whose first row is off the grid.
  const Tensor big = Tensor::empty({10, 8}, DType::BF16, dev, "big");
  const Matmul m = matmul(dev, DType::BF16, DType::BF16, 8, 8);
  EXPECT_EQ(grouped_path(grouped_matmul_operands(big.flat_slice(4, 72, {9, 8}), m.b, m.c), 8, 8, kRows, kOne), kLoop);
}

TEST(GroupedRule, NoRowsOrEmptyMatricesStayOnTheLoop) {
  CpuDevice dev;
  const Matmul m = matmul(dev, DType::BF16, DType::BF16, 48, 64);
  EXPECT_EQ(m.path(kOne, {0, 0, 0, 0}), kLoop);
  EXPECT_EQ(grouped_path(grouped_matmul_operands(m.a, m.b, m.c), 0, 64, kRows, kOne), kLoop);
}

TEST(GroupedRule, TheOneCallsScratchIsThreePointersPerNonEmptyGroup) {
  EXPECT_EQ(grouped_scratch_bytes(kOne, kRows), 3 * 8 * 3);
  EXPECT_EQ(grouped_scratch_bytes(kOne, {700, 0, 1, 333, 1024}), 3 * 8 * 4);
  EXPECT_EQ(grouped_scratch_bytes(kLoop, kRows), 0);
}

// The planner's scratch table follows the rule: on the default path, the one call, the products allocate its pointer
// arrays (on the loop, nothing).
TEST(GroupedRule, TheScratchTableFollowsTheRule) {
  CpuDevice dev;
  const Matmul m = matmul(dev, DType::BF16, DType::BF16, 48, 64);
  const Scratch& s = scratch();
  ASSERT_NE(s.grouped_matmul, nullptr);
  ASSERT_NE(s.grouped_weight_grad, nullptr);
  const int64_t want =
      grouped_scratch_bytes(grouped_path(grouped_matmul_operands(m.a, m.b, m.c), 48, 64, kRows), kRows);
  EXPECT_EQ(s.grouped_matmul(ScratchContext{}, m.a, m.b, m.c, kRows, true, 0.0f), want);
  const Tensor dy = Tensor::empty({9, 48}, DType::BF16, dev, "dy");
  const Tensor dw = Tensor::empty({4, 48, 64}, DType::BF16, dev, "dw");
  EXPECT_EQ(s.grouped_weight_grad(ScratchContext{}, dy, m.a, dw, kRows),
            grouped_scratch_bytes(grouped_path(grouped_weight_grad_operands(dy, m.a, dw), 48, 64, kRows), kRows));
  if (std::getenv("TANDEM_GROUPED_GEMM") == nullptr) {
    EXPECT_EQ(want, 3 * 8 * 3);  // the call's three pointer arrays over the 3 groups with rows
  }
}

// Through the front end on the planner's counting device (planning a GPU): the call's pointer arrays where the one
// call runs (the default run) and cuBLAS takes the product; nothing on the loop (ctest's test_ops_grouped_rule_loop
// runs this binary with TANDEM_GROUPED_GEMM=loop) or for a product the call does not take.
TEST(GroupedRule, TheCountingDeviceAllocatesThePointersOnlyWhereTheCallRuns) {
  device::CountingDevice dev(DeviceKind::Cuda);
  const bool asked = grouped_path_asked() == kOne;
  const auto scratch_of = [&](const std::function<void()>& op) {
    op();  // the fixed workspaces come with the device's first op
    const uint64_t live = dev.live_bytes();
    dev.reset_peak();
    op();
    return static_cast<int64_t>(dev.peak_bytes() - live);
  };
  const Matmul m = matmul(dev, DType::BF16, DType::BF16, 48, 64);
  EXPECT_EQ(scratch_of([&] { ops::grouped_matmul(m.a, m.b, m.c, kRows, true); }), asked ? 3 * 8 * 3 : 0);
  const Tensor dy = Tensor::empty({9, 48}, DType::BF16, dev, "dy");
  const Tensor dw = Tensor::empty({4, 48, 64}, DType::BF16, dev, "dw");
  EXPECT_EQ(scratch_of([&] { ops::grouped_weight_grad(dy, m.a, dw, kRows); }), asked ? 3 * 8 * 3 : 0);
  const Tensor dw32 = Tensor::empty({4, 48, 64}, DType::F32, dev, "dw");
  EXPECT_EQ(scratch_of([&] { ops::grouped_weight_grad(dy, m.a, dw32, kRows); }), 0);
}

}  // namespace
}  // namespace tandem::ops::cuda
