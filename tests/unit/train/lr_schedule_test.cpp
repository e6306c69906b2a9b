// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/lr_schedule.h"

#include <gtest/gtest.h>

#include "saturate/core/error.h"

namespace saturate {

TEST(LrSchedule, WarmsUpLinearlyToThePeak) {
  EXPECT_DOUBLE_EQ(lr_at(0, 100, 1.0, 10, ScheduleKind::kConstant), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(4, 100, 1.0, 10, ScheduleKind::kConstant), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(9, 100, 1.0, 10, ScheduleKind::kConstant), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(50, 100, 1.0, 10, ScheduleKind::kConstant), 1.0);
}

TEST(LrSchedule, CosineDecaysFromPeakToZero) {
  EXPECT_DOUBLE_EQ(lr_at(10, 110, 2.0, 10, ScheduleKind::kCosine), 2.0);
  EXPECT_NEAR(lr_at(60, 110, 2.0, 10, ScheduleKind::kCosine), 1.0, 1e-12);
  EXPECT_NEAR(lr_at(110, 110, 2.0, 10, ScheduleKind::kCosine), 0.0, 1e-12);
  EXPECT_GT(lr_at(30, 110, 2.0, 10, ScheduleKind::kCosine),
            lr_at(31, 110, 2.0, 10, ScheduleKind::kCosine));
}

TEST(TrainOptions, RejectsNonPositiveSizesNamingTheFlag) {
  TrainOptions o;
  o.batch_size = 0;
  EXPECT_THROW(o.validate(), Error);
  o = TrainOptions();
  o.lr = -1;
  EXPECT_THROW(o.validate(), Error);
  o = TrainOptions();
  o.epochs = 0;
  EXPECT_THROW(o.validate(), Error);
  o.steps = 5;  // steps override epochs
  EXPECT_NO_THROW(o.validate());
  o.steps = -2;
  EXPECT_THROW(o.validate(), Error);
}

TEST(TrainOptions, StepsAndWarmupResolve) {
  TrainOptions o;
  o.batch_size = 64;
  o.epochs = 2;
  EXPECT_EQ(o.total_steps(/*batches_per_epoch=*/938), 2 * 938);
  o.steps = 7;
  EXPECT_EQ(o.total_steps(/*batches_per_epoch=*/938), 7);
  EXPECT_EQ(o.resolved_warmup_steps(938), 18);    // 2% of the run
  EXPECT_EQ(o.resolved_warmup_steps(100000), 100);  // capped
  o.warmup_steps = 5;
  EXPECT_EQ(o.resolved_warmup_steps(3), 3);
}

TEST(TrainOptions, ParsesNamesWithSuggestions) {
  EXPECT_EQ(parse_optimizer("sgd"), OptimizerKind::kSgd);
  EXPECT_EQ(parse_schedule("cosine"), ScheduleKind::kCosine);
  try {
    parse_optimizer("adam");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'adamw'"), std::string::npos);
  }
}

}  // namespace saturate
