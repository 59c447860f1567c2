// Learning-rate schedules against values worked out by hand from DeepSpeed's formulas (lr_schedules.py, at
// last_batch_iteration = step), and the clipping coefficient.
#include <gtest/gtest.h>

#include "tandem/optim/clip.h"
#include "tandem/optim/schedule.h"

namespace tandem::optim {

TEST(Schedule, Constant) {
  spec::SchedulerConfig c;
  c.peak_lr = 3e-4;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 3e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 1000), 3e-4);
}

TEST(Schedule, WarmupLinearThenConstant) {
  spec::SchedulerConfig c;
  c.type = spec::SchedulerType::WarmupLR;
  c.warmup_type = spec::WarmupType::Linear;
  c.peak_lr = 1.1;
  c.warmup_num_steps = 10;
  c.warmup_min_lr = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 5), 0.6);   // 0.1 + 1.0 * 5/10
  EXPECT_DOUBLE_EQ(learning_rate(c, 9), 1.0);   // 0.1 + 1.0 * 9/10
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.1);  // the peak from step warmup_num_steps on
  EXPECT_DOUBLE_EQ(learning_rate(c, 50), 1.1);
}

TEST(Schedule, WarmupLogIsDeepSpeedsDefault) {
  spec::SchedulerConfig c;
  c.type = spec::SchedulerType::WarmupLR;
  EXPECT_EQ(c.warmup_type, spec::WarmupType::Log);
  c.peak_lr = 1.1;
  c.warmup_num_steps = 10;
  c.warmup_min_lr = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.1);                   // log 1 / log 10 = 0
  EXPECT_NEAR(learning_rate(c, 4), 0.7989700043360187, 1e-15);  // 0.1 + log 5 / log 10
  EXPECT_NEAR(learning_rate(c, 9), 1.1, 1e-15);                 // log 10 / log 10: the peak one step early
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.1);
}

TEST(Schedule, WarmupOfOneStepIsTwoAsInDeepSpeed) {
  spec::SchedulerConfig c;
  c.type = spec::SchedulerType::WarmupLR;
  c.peak_lr = 1.0;
  c.warmup_num_steps = 1;  // DeepSpeed uses max(2, warmup_num_steps)
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 1), 1.0);  // log 2 / log 2
  c.warmup_type = spec::WarmupType::Linear;
  EXPECT_DOUBLE_EQ(learning_rate(c, 1), 0.5);  // 1 / 2
  EXPECT_DOUBLE_EQ(learning_rate(c, 2), 1.0);
  c.warmup_num_steps = 0;  // no warmup at all
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 1.0);
}

TEST(Schedule, WarmupDecayLinearToMinAtTotal) {
  spec::SchedulerConfig c;
  c.type = spec::SchedulerType::WarmupDecayLR;
  c.warmup_type = spec::WarmupType::Linear;
  c.peak_lr = 1.0;
  c.warmup_min_lr = 0.2;
  c.warmup_num_steps = 10;
  c.total_num_steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(c, 5), 0.6);    // warming: 0.2 + 0.8 * 5/10
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.0);   // (110 - 10) / (110 - 10)
  EXPECT_DOUBLE_EQ(learning_rate(c, 60), 0.6);   // 0.2 + 0.8 * (110 - 60) / 100
  EXPECT_DOUBLE_EQ(learning_rate(c, 110), 0.2);  // back to warmup_min_lr
  EXPECT_DOUBLE_EQ(learning_rate(c, 200), 0.2);  // and no lower
  c.warmup_min_lr = 0.0;
  EXPECT_DOUBLE_EQ(learning_rate(c, 85), 0.25);  // 25 / 100
}

TEST(Schedule, WarmupCosine) {
  spec::SchedulerConfig c;
  c.type = spec::SchedulerType::WarmupCosineLR;
  c.warmup_type = spec::WarmupType::Linear;
  c.peak_lr = 1.0;
  c.warmup_num_steps = 10;
  c.total_num_steps = 110;
  c.cos_min_ratio = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(c, 5), 0.5);
  // DeepSpeed's cosine counts from 1 after the warmup: progress (step - 10 + 1) / 100.
  EXPECT_NEAR(learning_rate(c, 10), 0.9997779521645792, 1e-15);  // 0.1 + 0.9 (1 + cos 0.01 pi) / 2
  EXPECT_NEAR(learning_rate(c, 59), 0.55, 1e-12);                // halfway: 0.1 + 0.9 * 0.5
  EXPECT_NEAR(learning_rate(c, 109), 0.1, 1e-12);                // the floor at the last step of 110
  EXPECT_NEAR(learning_rate(c, 500), 0.1, 1e-12);
  c.warmup_type = spec::WarmupType::Log;
  c.warmup_min_ratio = 0.2;
  EXPECT_NEAR(learning_rate(c, 4), 0.7591760034688151, 1e-15);  // 0.2 + 0.8 log 5 / log 10
}

TEST(Schedule, WarmupCosineDefaultFloorIsDeepSpeeds) {
  spec::SchedulerConfig c;
  c.type = spec::SchedulerType::WarmupCosineLR;
  EXPECT_DOUBLE_EQ(c.cos_min_ratio, 1e-4);
  c.peak_lr = 1.0;
  c.warmup_num_steps = 0;
  c.total_num_steps = 4;
  EXPECT_NEAR(learning_rate(c, 0), 0.8535680352542144, 1e-15);  // 1e-4 + (1 - 1e-4)(1 + cos(pi/4)) / 2
  EXPECT_NEAR(learning_rate(c, 3), 1e-4, 1e-15);
}

TEST(Clip, Coefficient) {
  EXPECT_FLOAT_EQ(clip_coefficient(10.0, 0.0), 1.0f);  // off
  EXPECT_FLOAT_EQ(clip_coefficient(0.5, 1.0), 1.0f);   // under the limit
  EXPECT_NEAR(clip_coefficient(4.0, 1.0), 0.25f, 1e-6);
}

}  // namespace tandem::optim
