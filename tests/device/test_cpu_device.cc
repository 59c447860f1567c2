// CpuDevice: live and peak counting, and the out-of-budget message.
#include <gtest/gtest.h>

#include "tandem/core/tensor.h"
#include "tandem/device/cpu_device.h"

namespace tandem::device {

TEST(CpuDevice, CountsLiveAndPeak) {
  CpuDevice dev;
  {
    Tensor a = Tensor::empty({1000}, DType::F32, dev, "a");
    Tensor b = Tensor::empty({500}, DType::BF16, dev, "b");
    EXPECT_EQ(dev.live_bytes(), 4000u + 1000u);
  }
  EXPECT_EQ(dev.live_bytes(), 0u);
  EXPECT_EQ(dev.peak_bytes(), 5000u);
  dev.reset_peak();
  EXPECT_EQ(dev.peak_bytes(), 0u);
}

TEST(CpuDevice, ViewsKeepStorageAlive) {
  CpuDevice dev;
  Tensor view;
  {
    Tensor a = Tensor::empty({10, 10}, DType::F32, dev, "a");
    view = a.rows(2, 3);
  }
  EXPECT_EQ(dev.live_bytes(), 400u);
  view = Tensor();
  EXPECT_EQ(dev.live_bytes(), 0u);
}

TEST(CpuDevice, OverBudgetNamesTensorBudgetAndHolders) {
  CpuDevice dev(1 << 20);                                                        // 1 MiB
  Tensor held = Tensor::empty({200000}, DType::F32, dev, "blocks.0.fc.weight");  // 800,000 bytes
  try {
    Tensor more = Tensor::empty({100000}, DType::F32, dev, "blocks.1.fc.weight");  // 400,000 bytes
    FAIL() << "expected an out-of-budget error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blocks.1.fc.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("390.6 KiB"), std::string::npos) << msg;             // its bytes
    EXPECT_NE(msg.find("1.0 MiB"), std::string::npos) << msg;               // the budget
    EXPECT_NE(msg.find("781.2 KiB"), std::string::npos) << msg;             // already held
    EXPECT_NE(msg.find("'blocks.0.fc.weight'"), std::string::npos) << msg;  // the largest holder
    EXPECT_NE(msg.find("device_memory"), std::string::npos) << msg;         // what to do
  }
  EXPECT_EQ(dev.live_bytes(), 800000u);  // the failed allocation holds nothing
}

// The full Llama-3-8B's optimizer on a host of 125.1 GiB available: with 121.6 GiB, then 119.9 GiB of offloaded state
// (both under all of it), the kernel killed the run for memory once the process held 123.2 GiB in all. What offload
// may take leaves room for the rest.
TEST(HostMemory, OffloadLeavesRoomForTheProcessesAndTheSystem) {
  const uint64_t gib = uint64_t{1} << 30;
  const auto usable = [&](double available_gib) {
    return static_cast<double>(usable_host_memory(static_cast<uint64_t>(available_gib * gib))) / gib;
  };
  EXPECT_LT(usable(125.1), 119.9);
  EXPECT_NEAR(usable(125.1), 125.1 * 0.95, 0.01);
  EXPECT_EQ(usable(20.0), 16.0);  // at least 4 GiB kept
  EXPECT_EQ(usable(3.5), 0.0);
  EXPECT_LE(usable_host_memory(), available_host_memory());
}

}  // namespace tandem::device
