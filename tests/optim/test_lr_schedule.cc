// Learning-rate schedules and the clipping coefficient.
#include <gtest/gtest.h>

#include "tandem/core/error.h"
#include "tandem/optim/clip.h"
#include "tandem/optim/schedule.h"

namespace tandem::optim {

TEST(Schedule, Constant) {
  ScheduleConfig c;
  c.lr = 3e-4;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 3e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 1000), 3e-4);
}

TEST(Schedule, WarmupLinearThenConstant) {
  ScheduleConfig c;
  c.type = "WarmupLR";
  c.lr = 1.0;
  c.warmup_steps = 10;
  c.warmup_min_lr = 0.0;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 50), 1.0);
}

TEST(Schedule, WarmupCosine) {
  ScheduleConfig c;
  c.type = "WarmupCosineLR";
  c.lr = 1.0;
  c.warmup_steps = 10;
  c.total_steps = 110;
  c.cos_min_ratio = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(c, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.0);
  EXPECT_NEAR(learning_rate(c, 60), 0.55, 1e-12);  // halfway down the cosine: 0.1 + 0.9 * 0.5
  EXPECT_NEAR(learning_rate(c, 110), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(c, 500), 0.1, 1e-12);
}

TEST(Schedule, UnknownTypeNamed) {
  ScheduleConfig c;
  c.type = "OneCycle";
  EXPECT_THROW(learning_rate(c, 0), Error);
}

TEST(Clip, Coefficient) {
  EXPECT_FLOAT_EQ(clip_coefficient(10.0, 0.0), 1.0f);  // off
  EXPECT_FLOAT_EQ(clip_coefficient(0.5, 1.0), 1.0f);   // under the limit
  EXPECT_NEAR(clip_coefficient(4.0, 1.0), 0.25f, 1e-6);
}

}  // namespace tandem::optim
