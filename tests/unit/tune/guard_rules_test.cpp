// SPDX-License-Identifier: Apache-2.0
// The quality guard's decisions on hand-made runs: each rule rejecting a real bad case (an
// accuracy drop, a diverged loss, a run over memory, a budget too small, seeds too noisy) and
// letting a harmless one through.
#include "saturate/tune/guard_rules.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "saturate/tune/noise_rule.h"
#include "saturate/tune/tuner.h"

namespace saturate {
namespace {

QualityRun run(double metric, double loss, int64_t peak = 0) {
  QualityRun r;
  r.validation_metric = metric;
  r.final_loss = loss;
  r.peak_memory_bytes = peak;
  return r;
}

TuneOptions options() {
  TuneOptions o;
  o.quality_tolerance = 0.01;
  o.loss_tolerance = 0.10;
  o.max_tolerance_factor = 5.0;
  o.min_quality_steps = 8;
  o.quality_samples = 1000;
  o.eval_samples = 500;
  return o;
}

TEST(GuardRules, TolerancesWidenToTwiceTheSeedNoise) {
  const GuardTolerances t = guard_tolerances(run(0.80, 0.50), run(0.77, 0.55), options());
  EXPECT_NEAR(t.metric_noise, 0.03, 1e-12);
  EXPECT_NEAR(t.metric, 0.06, 1e-12);        // 2 × 0.03 > the 0.01 asked for
  EXPECT_NEAR(t.loss_noise, 0.10, 1e-12);
  EXPECT_NEAR(t.loss, 0.20, 1e-12);
  EXPECT_FALSE(t.conclusive);                // 0.06 > 5 × 0.01
  const GuardTolerances quiet = guard_tolerances(run(0.80, 0.50), run(0.801, 0.50), options());
  EXPECT_NEAR(quiet.metric, 0.01, 1e-12);    // the asked tolerance is the floor
  EXPECT_TRUE(quiet.conclusive);
}

TEST(GuardRules, RejectsAnAccuracyDropBeyondTheTolerance) {
  GuardTolerances tol;
  tol.metric = 0.01;
  tol.loss = 0.10;
  const QualityRun base = run(0.85, 0.40);
  EXPECT_TRUE(judge_candidate(base, run(0.845, 0.41), tol, 0).accepted());
  const GuardVerdict drop = judge_candidate(base, run(0.83, 0.41), tol, 0);
  EXPECT_FALSE(drop.accepted());
  EXPECT_FALSE(drop.metric_ok);
  EXPECT_TRUE(drop.loss_ok);
  EXPECT_EQ(drop.reasons(), "accuracy drop above the tolerance");
}

TEST(GuardRules, RejectsADivergedOrRisingLoss) {
  GuardTolerances tol;
  tol.metric = 0.01;
  tol.loss = 0.10;
  const QualityRun base = run(0.85, 0.40);
  const GuardVerdict nan = judge_candidate(
      base, run(0.86, std::numeric_limits<double>::quiet_NaN()), tol, 0);
  EXPECT_FALSE(nan.accepted());
  EXPECT_EQ(nan.reasons(), "accuracy drop above the tolerance, loss rise above the tolerance");
  const GuardVerdict rise = judge_candidate(base, run(0.85, 0.50), tol, 0);  // +25%
  EXPECT_FALSE(rise.accepted());
  EXPECT_EQ(rise.reasons(), "loss rise above the tolerance");
  // Near zero, a relative rise of nothing does not reject: the floor is 0.01 absolute.
  EXPECT_TRUE(judge_candidate(run(1.0, 0.001), run(1.0, 0.004), tol, 0).accepted());
}

TEST(GuardRules, RejectsARunOverTheMemoryTarget) {
  GuardTolerances tol;
  tol.metric = 0.01;
  tol.loss = 0.10;
  const QualityRun base = run(0.85, 0.40);
  const GuardVerdict over = judge_candidate(base, run(0.90, 0.30, /*peak=*/2000), tol, 1000);
  EXPECT_FALSE(over.accepted());
  EXPECT_EQ(over.reasons(), "out of memory in its quality run");
  QualityRun oom = run(0.90, 0.30);
  oom.fits = false;
  EXPECT_FALSE(judge_candidate(base, oom, tol, 1000).accepted());
  // An unknown peak (0) is not held against it.
  EXPECT_TRUE(judge_candidate(base, run(0.90, 0.30, 0), tol, 1000).accepted());
}

TEST(GuardRules, SizesRunsToTheBudgetLeft) {
  const TuneOptions o = options();
  GuardCost cost;
  cost.seconds_per_sample = 4 * 1e-3;  // 4 runs at 1000 samples/s
  cost.largest_batch = 64;
  cost.runs = 4;
  cost.slowest_samples_per_s = 1000;
  // No budget: what was asked for.
  const GuardSizing free = size_guard(cost, o, std::numeric_limits<double>::infinity());
  EXPECT_EQ(free.samples, 1000);
  EXPECT_EQ(free.needed, 8 * 64);
  EXPECT_TRUE(free.affordable());
  // 10 s left: 8 s usable, 1 s of it evaluating (4 × 500 / 2000), 7 s / (1.15 × 4 ms) ≈ 1521.
  EXPECT_EQ(size_guard(cost, o, 10.0).samples, 1000);
  // 2 s left: (1.6 − 1) / (1.15 × 4 ms) ≈ 130 samples, under the 512 a meaningful run needs.
  const GuardSizing tight = size_guard(cost, o, 2.0);
  EXPECT_EQ(tight.samples, 130);
  EXPECT_FALSE(tight.affordable());
  // Nothing left: zero, never negative.
  EXPECT_EQ(size_guard(cost, o, -5.0).samples, 0);
}

TEST(GuardRules, AMeaningfulRunOutranksTheSamplesAskedFor) {
  TuneOptions o = options();
  o.quality_samples = 100;
  GuardCost cost;
  cost.seconds_per_sample = 1e-3;
  cost.largest_batch = 256;
  const GuardSizing z = size_guard(cost, o, std::numeric_limits<double>::infinity());
  EXPECT_EQ(z.samples, 8 * 256);
}

// The one noise rule the stages and the batch search share.
TEST(NoiseRule, AGainCountsOnlyBeyondTwiceTheCombinedNoiseAndTheMinimum) {
  EXPECT_TRUE(beats(110, 0.01, 100, 0.01, 0.03));    // 10% against 2 × 1.4%
  EXPECT_FALSE(beats(110, 0.04, 100, 0.04, 0.03));   // 10% against 2 × 5.7%: noise
  EXPECT_FALSE(beats(102, 0.001, 100, 0.001, 0.03)); // clear, but below the 3% that matters
  EXPECT_TRUE(beats(1, 0.5, 0, 0, 0.03));            // anything beats nothing
  EXPECT_TRUE(clearly_slower(90, 100, 0.04));        // 10% short of 2 × 4%
  EXPECT_FALSE(clearly_slower(93, 100, 0.04));       // 7% short: within noise
}

}  // namespace
}  // namespace saturate
