// The op front end: devices without a backend are refused by name (in every dtype), mixed devices and bad dtypes
// are caught.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>

#include "ops_test_util.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

// Host memory that claims to be a CUDA device: enough to reach the dispatch without a GPU.
class FakeCudaDevice final : public Device {
 public:
  void* allocate(size_t bytes, std::string_view) override {
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  }
  void release(void* ptr, size_t) override { std::free(ptr); }
  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return "cuda:0"; }
  void fill_zero(void* ptr, size_t bytes) override { std::memset(ptr, 0, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
};

#ifndef TANDEM_WITH_CUDA
// Without the CUDA backend a CUDA tensor reaches no implementation (with it, bench/gpu/ops_check covers CUDA).
TEST(OpsDispatch, DeviceWithoutBackendThrowsNamingOpAndDevice) {
  FakeCudaDevice gpu;
  Tensor x = Tensor::zeros({4, 3}, DType::F32, gpu, "x");
  Tensor y = Tensor::zeros({4, 3}, DType::F32, gpu, "y");
  try {
    relu_forward(x, y);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("relu_forward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  }
  EXPECT_THROW(sum_squares(x), Error);
  EXPECT_THROW(matmul(x, y, Tensor::zeros({4, 4}, DType::F32, gpu, "c"), false, true), Error);

  // The new ops and the 16-bit dtypes pass validation and reach the same refusal, naming op and device.
  Tensor h = Tensor::zeros({4, 3}, DType::BF16, gpu, "h");
  Tensor n = Tensor::zeros({4}, DType::F32, gpu, "n");
  Tensor one = Tensor::zeros({1}, DType::F32, gpu, "one");
  Tensor targets = Tensor::zeros({4}, DType::I32, gpu, "targets");
  const std::pair<const char*, std::function<void()>> calls[] = {
      {"fill", [&] { fill(h, 1.0f); }},
      {"cross_entropy_finish", [&] { cross_entropy_finish(n, n, n, targets, one); }},
      {"matmul",
       [&] {
         matmul(h, h, Tensor::zeros({4, 4}, DType::F32, gpu, "c"), false, true);
       }},
      {"cast", [&] { cast(h, x); }}};
  for (const auto& [op, call] : calls) {
    try {
      call();
      ADD_FAILURE() << "expected an Error from " << op;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(op), std::string::npos) << msg;
      EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
    }
  }
}
#endif

TEST(OpsDispatch, MixedDeviceKindsThrow) {
  FakeCudaDevice gpu;
  device::CpuDevice cpu;
  Tensor a = Tensor::zeros({4, 3}, DType::F32, gpu, "a");
  Tensor b = Tensor::zeros({4, 3}, DType::F32, cpu, "b");
  EXPECT_THROW(add(b, b, a), Error);
  EXPECT_THROW(add(a, b, b), Error);
}

TEST(OpsDispatch, WrongDtypeThrows) {
  device::CpuDevice cpu;
  Tensor x = Tensor::zeros({4, 3}, DType::BF16, cpu, "x");
  Tensor y = Tensor::zeros({4, 3}, DType::F32, cpu, "y");
  EXPECT_THROW(relu_forward(x, y), Error);
  EXPECT_THROW(embedding_forward(y.view({12}).rows(0, 4), testing::randn(cpu, {5, 3}, 1), y), Error);
}

}  // namespace
}  // namespace tandem::ops
