// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/goodput.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "saturate/tune/effective_batch.h"

namespace saturate {
namespace {

NoiseScaleEstimate noise(double phi, double low, double high, int64_t steps = 100) {
  NoiseScaleEstimate n;
  n.phi = phi;
  n.low = low;
  n.high = high;
  n.steps = steps;
  n.b_small = 16;
  n.b_big = 64;
  return n;
}

// Throughput that keeps rising to 512, as on a machine with room to spare.
const std::vector<std::pair<int64_t, double>> kCurve = {
    {32, 600}, {64, 1000}, {128, 1900}, {256, 3000}, {512, 3600}};

TEST(Goodput, PicksTheBatchFastestToTheTargetNotTheFastestInSamples) {
  // φ credited at its lower end, 100: E(256) = 164/356, E(512) = 164/612.
  const GoodputChoice g =
      choose_by_goodput(kCurve, 64, noise(150, 100, 220), "raw", OptimizerKind::kAdamW);
  ASSERT_TRUE(g.usable);
  EXPECT_EQ(g.phi_used, 100);
  EXPECT_EQ(g.chosen, 256);  // 3.0 × 0.461 = 1.38, while 512 gives 3.6 × 0.268 = 0.96
  EXPECT_NEAR(g.predicted_speedup, 3.0 * 164.0 / 356.0, 1e-9);
  EXPECT_NEAR(g.gain, 256.0 * 164.0 / (64.0 * 356.0), 1e-9);
  EXPECT_NEAR(g.lr_multiplier, std::sqrt(g.gain), 1e-9);  // AdamW: √r, not √(256/64) = 2
  ASSERT_EQ(g.curve.size(), 4u);                          // 32 < B0 is not a candidate
  EXPECT_NE(g.why.find("predicted 1.38× as fast to the target"), std::string::npos) << g.why;
  // SGD takes the gain itself (AdaScale), still below the linear rule's 4.
  const GoodputChoice sgd =
      choose_by_goodput(kCurve, 64, noise(150, 100, 220), "raw", OptimizerKind::kSgd);
  EXPECT_NEAR(sgd.lr_multiplier, sgd.gain, 1e-12);
  EXPECT_LT(sgd.lr_multiplier, 4.0);
}

TEST(Goodput, ALowNoiseScaleKeepsTheUsersBatchAndSaysWhyInNumbers) {
  // φ ≈ 10: at 128 each sample is worth 74/138; 1.9 × 0.536 = 1.02 < 1.05.
  const GoodputChoice g =
      choose_by_goodput(kCurve, 64, noise(12, 10, 15), "raw", OptimizerKind::kAdamW);
  ASSERT_TRUE(g.usable);
  EXPECT_EQ(g.chosen, 64);
  EXPECT_EQ(g.lr_multiplier, 1.0);
  EXPECT_NE(g.why.find("each sample is worth"), std::string::npos) << g.why;
  EXPECT_NE(g.why.find("φ 12 (95%: 10–15, raw)"), std::string::npos) << g.why;
  const BatchChoice c = goodput_batch(RunConfig{}, [] {
    RunConfig b;
    b.train.batch_size = 64;
    b.train.lr = 1e-3;
    return b;
  }(), g);
  EXPECT_EQ(c.config.train.batch_size, 64);
  EXPECT_EQ(c.config.train.lr, 1e-3);
  EXPECT_EQ(c.outcome, EffectiveBatchOutcome::kUnchanged);
}

TEST(Goodput, AnUnresolvedNoiseScaleCreditsOnlyItsLowerBound) {
  // |G|² not resolved from zero: φ anywhere above 0. Credited 0, each sample of a larger batch
  // is worth B0/B, and 1.9× the samples/s at twice the batch does not pay.
  const double inf = std::numeric_limits<double>::infinity();
  const GoodputChoice g =
      choose_by_goodput(kCurve, 64, noise(300, 0, inf), "raw", OptimizerKind::kAdamW);
  EXPECT_TRUE(g.usable);
  EXPECT_EQ(g.phi_used, 0);
  EXPECT_EQ(g.chosen, 64);
  EXPECT_NE(g.why.find("(95%: 0–∞, raw), credited 0"), std::string::npos) << g.why;
  // Too few steps, or no lower bound at all: not used.
  EXPECT_FALSE(choose_by_goodput(kCurve, 64, noise(300, 100, 400, kNoiseMinSteps - 1), "raw",
                                 OptimizerKind::kSgd)
                   .usable);
  EXPECT_FALSE(choose_by_goodput(kCurve, 64, noise(inf, std::nan(""), inf), "raw",
                                 OptimizerKind::kSgd)
                   .usable);
  EXPECT_FALSE(choose_by_goodput(kCurve, 64, NoiseScaleEstimate{}, "raw", OptimizerKind::kSgd)
                   .usable);
  // Nor without a throughput at the user's batch to compare with.
  EXPECT_FALSE(choose_by_goodput({{128, 1900}}, 64, noise(150, 100, 220), "raw",
                                 OptimizerKind::kSgd)
                   .usable);
}

TEST(Goodput, TheChosenBatchGetsTheGainScaledLrAndAWarmUp) {
  RunConfig base;
  base.train.batch_size = 64;
  base.train.lr = 1e-3;
  base.train.warmup_steps = 0;
  const GoodputChoice g =
      choose_by_goodput(kCurve, 64, noise(150, 100, 220), "raw", OptimizerKind::kAdamW);
  const BatchChoice c = goodput_batch(base, base, g);
  EXPECT_EQ(c.config.train.batch_size, 256);
  EXPECT_EQ(c.config.train.accumulate, 1);
  EXPECT_NEAR(c.config.train.lr, 1e-3 * g.lr_multiplier, 1e-15);
  EXPECT_EQ(c.config.train.warmup_steps, -1);
  EXPECT_EQ(c.outcome, EffectiveBatchOutcome::kLrRescaled);
  EXPECT_NE(c.why.find("by goodput"), std::string::npos) << c.why;
}

}  // namespace
}  // namespace saturate
