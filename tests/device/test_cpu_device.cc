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

}  // namespace tandem::device
