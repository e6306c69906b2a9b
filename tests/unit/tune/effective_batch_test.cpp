// SPDX-License-Identifier: Apache-2.0
// The effective-batch rules, as the tuner's batch stage and `train --config` replay use them.
#include "saturate/tune/effective_batch.h"

#include <gtest/gtest.h>

#include "saturate/core/error.h"

namespace saturate {
namespace {

RunConfig user(int64_t batch, double lr, OptimizerKind opt = OptimizerKind::kSgd) {
  RunConfig c;
  c.train.batch_size = batch;
  c.train.lr = lr;
  c.train.optimizer = opt;
  return c;
}

TEST(EffectiveBatch, AGrownBatchRescalesTheLearningRateUnderAuto) {
  const RunConfig base = user(64, 0.1);
  const BatchChoice c = choose_effective_batch(base, base, 256, 512, EffectiveBatch::kAuto);
  EXPECT_EQ(c.outcome, EffectiveBatchOutcome::kLrRescaled);
  EXPECT_EQ(c.config.train.batch_size, 256);
  EXPECT_EQ(c.config.train.accumulate, 1);
  EXPECT_DOUBLE_EQ(c.config.train.lr, 0.4);  // linear for SGD
  EXPECT_EQ(c.config.train.warmup_steps, -1);  // the default warm-up
  const RunConfig adam = user(64, 1e-3, OptimizerKind::kAdamW);
  EXPECT_DOUBLE_EQ(choose_effective_batch(adam, adam, 256, 512, EffectiveBatch::kAuto)
                       .config.train.lr,
                   2e-3);  // square root for AdamW
}

TEST(EffectiveBatch, KeepHoldsTheUsersBatchWhenALargerOneIsFaster) {
  const RunConfig base = user(64, 0.1);
  const BatchChoice c = choose_effective_batch(base, base, 256, 512, EffectiveBatch::kKeep);
  EXPECT_EQ(c.outcome, EffectiveBatchOutcome::kKept);
  EXPECT_EQ(c.config.train.batch_size, 64);
  EXPECT_EQ(c.config.train.accumulate, 1);
  EXPECT_DOUBLE_EQ(c.config.train.lr, 0.1);
}

TEST(EffectiveBatch, ABatchThatDoesNotFitBecomesMicroBatches) {
  const RunConfig base = user(1000, 0.1);
  const BatchChoice c = choose_effective_batch(base, base, 96, 128, EffectiveBatch::kAuto);
  EXPECT_EQ(c.outcome, EffectiveBatchOutcome::kKept);
  EXPECT_EQ(c.config.train.batch_size, 1000);
  EXPECT_EQ(c.config.train.accumulate, 11);  // ⌈1000 / 96⌉
  EXPECT_LE(c.config.micro_batch(), 96);
  EXPECT_DOUBLE_EQ(c.config.train.lr, 0.1);
  EXPECT_NE(c.why.find("does not fit"), std::string::npos) << c.why;
  // Rescale takes the smaller batch instead, with the LR scaled down.
  const BatchChoice r = choose_effective_batch(base, base, 96, 128, EffectiveBatch::kRescale);
  EXPECT_EQ(r.outcome, EffectiveBatchOutcome::kLrRescaled);
  EXPECT_EQ(r.config.train.batch_size, 96);
  EXPECT_NEAR(r.config.train.lr, 0.0096, 1e-12);
}

TEST(EffectiveBatch, TheSameBatchChangesNothing) {
  const RunConfig base = user(64, 0.1);
  const BatchChoice c = choose_effective_batch(base, base, 64, 512, EffectiveBatch::kRescale);
  EXPECT_EQ(c.outcome, EffectiveBatchOutcome::kUnchanged);
  EXPECT_EQ(c.config.describe(), base.describe());
}

TEST(EffectiveBatch, SplitToFitUsesHalfTheLargestSafeBatch) {
  EXPECT_EQ(split_to_fit(user(1000, 0.1), 128).train.accumulate, 16);  // ⌈1000 / 64⌉
  EXPECT_EQ(split_to_fit(user(1000, 0.1), 0).train.accumulate, 1);     // no search: as given
  EXPECT_EQ(micro_batches_for(10, 3), 4);
  EXPECT_EQ(micro_batches_for(0, 3), 1);
  EXPECT_THROW(micro_batches_for(10, 0), Error);
}

TEST(EffectiveBatch, OutcomeNamesRoundTripAndABadOneIsRefused) {
  for (auto e : {EffectiveBatchOutcome::kUnchanged, EffectiveBatchOutcome::kKept,
                 EffectiveBatchOutcome::kLrRescaled})
    EXPECT_EQ(parse_effective_batch_outcome(to_string(e)), e);
  EXPECT_THROW(parse_effective_batch_outcome("doubled"), Error);
}

RunConfig plan_config(int64_t batch, int accumulate, int world, double lr) {
  RunConfig c = user(batch, lr);
  c.train.accumulate = accumulate;
  c.world_size = world;
  return c;
}

TEST(EffectiveBatchReplay, KeptPlanSplitsItsGlobalBatchOverMoreRanks) {
  ReplayRequest req;
  req.world = 4;
  const BatchReplay r =
      replay_plan_batch(plan_config(256, 4, 1, 0.1), EffectiveBatchOutcome::kKept, req);
  EXPECT_EQ(r.batch_size, 64);   // 256 global over 4 ranks
  EXPECT_EQ(r.accumulate, 1);    // the plan's micro-batch of 64 holds one step
  EXPECT_DOUBLE_EQ(r.lr, 0.1);   // the global batch is the plan's: nothing to rescale
  EXPECT_TRUE(r.warn.empty());
  ASSERT_FALSE(r.info.empty());
}

TEST(EffectiveBatchReplay, RescaledPlanRescalesOnAnotherGlobalBatch) {
  ReplayRequest req;
  req.world = 2;
  const BatchReplay r =
      replay_plan_batch(plan_config(32, 1, 1, 0.1), EffectiveBatchOutcome::kLrRescaled, req);
  EXPECT_EQ(r.batch_size, 32);
  EXPECT_DOUBLE_EQ(r.lr, 0.2);
  ASSERT_EQ(r.info.size(), 1u);
  EXPECT_NE(r.info[0].find("global batch 64 (2 ranks × 32) instead of the plan's 32"),
            std::string::npos)
      << r.info[0];
}

TEST(EffectiveBatchReplay, UnchangedPlanWarnsInsteadOfRescaling) {
  ReplayRequest req;
  req.world = 2;
  const BatchReplay r =
      replay_plan_batch(plan_config(32, 1, 1, 0.1), EffectiveBatchOutcome::kUnchanged, req);
  EXPECT_DOUBLE_EQ(r.lr, 0.1);
  ASSERT_EQ(r.warn.size(), 1u);
  EXPECT_NE(r.warn[0].find("rule would give --lr 0.200000"), std::string::npos) << r.warn[0];
}

TEST(EffectiveBatchReplay, GivenFlagsWinAndAGivenBatchKeepsThePlansMicroBatch) {
  ReplayRequest req;
  req.world = 1;
  req.batch_given = true;
  req.batch_size = 300;
  const BatchReplay r =
      replay_plan_batch(plan_config(200, 4, 1, 0.1), EffectiveBatchOutcome::kKept, req);
  EXPECT_EQ(r.batch_size, 300);
  EXPECT_EQ(r.accumulate, 6);  // micro-batch 50, as the plan's
  req.lr_given = true;
  req.lr = 0.05;
  EXPECT_DOUBLE_EQ(
      replay_plan_batch(plan_config(200, 4, 1, 0.1), EffectiveBatchOutcome::kLrRescaled, req).lr,
      0.05);
}

}  // namespace
}  // namespace saturate
