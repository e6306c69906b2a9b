// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/goodput.h"

#include <cmath>
#include <limits>
#include <random>

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
  // A resolved φ is credited at its value, 150: E(256) = 214/406, E(512) = 214/662.
  const GoodputChoice g =
      choose_by_goodput(kCurve, 64, noise(150, 100, 220), "raw", OptimizerKind::kAdamW);
  ASSERT_TRUE(g.usable);
  EXPECT_EQ(g.phi_used, 150);
  EXPECT_EQ(g.chosen, 256);  // 3.0 × 0.527 = 1.58, while 512 gives 3.6 × 0.323 = 1.16
  EXPECT_NEAR(g.predicted_speedup, 3.0 * 214.0 / 406.0, 1e-9);
  EXPECT_NEAR(g.gain, 256.0 * 214.0 / (64.0 * 406.0), 1e-9);
  EXPECT_NEAR(g.lr_multiplier, std::sqrt(g.gain), 1e-9);  // AdamW: √r, not √(256/64) = 2
  ASSERT_EQ(g.curve.size(), 4u);                          // 32 < B0 is not a candidate
  EXPECT_NE(g.why.find("predicted 1.58× as fast to the target"), std::string::npos) << g.why;
  // SGD takes the gain itself (AdaScale), still below the linear rule's 4.
  const GoodputChoice sgd =
      choose_by_goodput(kCurve, 64, noise(150, 100, 220), "raw", OptimizerKind::kSgd);
  EXPECT_NEAR(sgd.lr_multiplier, sgd.gain, 1e-12);
  EXPECT_LT(sgd.lr_multiplier, 4.0);
}

TEST(Goodput, ALowNoiseScaleKeepsTheUsersBatchAndSaysWhyInNumbers) {
  // φ 12: at 128 each sample is worth 76/140; 1.9 × 0.543 = 1.03 < 1.05.
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
// A training-loss curve whose expected loss falls with progress p (samples at b0's worth) as
// 0.2 + 2.1·exp(−p/20000), with a batch of `batch` making progress E per sample and
// per-step noise of sd 0.05/√(batch/64): what the guard's runs look like, with the efficiency
// known.
std::vector<double> loss_curve(int64_t batch, int64_t samples, double efficiency, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise01(0.0, 1.0);
  std::vector<double> losses;
  const double sd = 0.05 / std::sqrt(static_cast<double>(batch) / 64.0);
  for (int64_t k = 1; k * batch <= samples; ++k) {
    const double progress = static_cast<double>(k * batch) * efficiency;
    losses.push_back(0.2 + 2.1 * std::exp(-progress / 20000.0) + sd * noise01(rng));
  }
  return losses;
}

TEST(Goodput, Issue35_MeasuredEfficiencyRecoversAKnownEfficiencyFromLossCurves) {
  const std::vector<std::vector<double>> ref = {loss_curve(64, 40000, 1.0, 1),
                                                loss_curve(64, 40000, 1.0, 2)};
  for (const double truth : {0.3, 0.55, 0.8}) {
    // Samples that take it to 90% of the reference's progress, so the curves cross.
    const auto samples = static_cast<int64_t>(0.9 * 40000 / truth);
    const MeasuredEfficiency m =
        measure_efficiency(ref, 64, loss_curve(512, samples, truth, 3), 512);
    ASSERT_FALSE(m.diverged) << truth;
    EXPECT_FALSE(m.crossed_late) << truth;
    EXPECT_NEAR(m.efficiency, truth, 0.1 * truth) << truth;
  }
  // Runs that go further than the reference ever did (a batch judged at equal time that pays):
  // measured where they crossed the reference's last loss, not capped by the reference's end.
  for (const double truth : {0.5, 0.9}) {
    const MeasuredEfficiency far =
        measure_efficiency(ref, 64, loss_curve(256, 160000, truth, 4), 256);
    ASSERT_FALSE(far.diverged) << truth;
    EXPECT_TRUE(far.crossed_late) << truth;
    EXPECT_NEAR(far.efficiency, truth, 0.1 * truth) << truth;
  }
}

TEST(Goodput, Issue35_ARunThatDivergesOrNeverLearnsIsNotAnEfficiency) {
  const std::vector<std::vector<double>> ref = {loss_curve(64, 40000, 1.0, 1)};
  std::vector<double> nan_run = loss_curve(512, 80000, 0.5, 2);
  nan_run.back() = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(measure_efficiency(ref, 64, nan_run, 512).diverged);
  // Stuck at the starting loss (a learning rate that blew the weights up, then plateaued).
  const std::vector<double> stuck(150, 2.3);
  EXPECT_TRUE(measure_efficiency(ref, 64, stuck, 512).diverged);
  EXPECT_TRUE(std::isnan(measure_efficiency(ref, 64, {}, 512).efficiency));
}

TEST(Goodput, Issue35_PhiFromEfficiencyInvertsTheEfficiencyCurve) {
  for (const double phi : {10.0, 100.0, 1000.0}) {
    const double e = batch_efficiency(phi, 64, 512);
    EXPECT_NEAR(phi_from_efficiency(e, 64, 512), phi, 1e-6 * phi);
  }
  EXPECT_EQ(phi_from_efficiency(0.05, 64, 512), 0.0);  // below B0/B: nothing gained
  EXPECT_TRUE(std::isinf(phi_from_efficiency(1.2, 64, 512)));
}

TEST(Goodput, Issue35_TheSearchGoesDownTheCurveAtTheCorrectedPhi) {
  // φ measured 2000 (low end 1500) takes 512; the guard's run then measured E(512) = 0.3, i.e.
  // φ = (512·0.3 − 64)/0.7 = 128.
  const GoodputChoice g =
      choose_by_goodput(kCurve, 64, noise(2000, 1500, 2600), "raw", OptimizerKind::kSgd);
  ASSERT_EQ(g.chosen, 512) << g.why;
  const double phi = phi_from_efficiency(0.3, 64, 512);
  EXPECT_NEAR(phi, 128, 1e-9);
  const GoodputChoice next = choose_below(g, 512, phi, OptimizerKind::kSgd);
  ASSERT_TRUE(next.usable);
  EXPECT_EQ(next.phi_used, phi);
  // At φ 128: 128 gives 1.9 × 192/256 = 1.43, 256 gives 3.0 × 192/384 = 1.5.
  EXPECT_EQ(next.chosen, 256) << next.why;
  EXPECT_NEAR(next.predicted_speedup, 1.5, 1e-9);
  EXPECT_NEAR(next.gain, 256.0 * 192.0 / (64.0 * 384.0), 1e-9);
  EXPECT_NE(next.why.find("what the guard's runs measured"), std::string::npos) << next.why;
  EXPECT_EQ(next.curve.size(), g.curve.size()) << "the whole curve stays on record";
  // Nothing left below 128 but the user's batch: the search ends there.
  EXPECT_EQ(choose_below(g, 128, phi, OptimizerKind::kSgd).chosen, 64);
}

TEST(Goodput, Issue35_TheSearchGoesUpTheCurveWhenARunLearnedMoreThanPredicted) {
  // φ 150 takes 256 (see above); its run then measured E(256) = 0.8, i.e. φ = (256·0.8 − 64)/0.2
  // = 704: at that φ, 512 gives 3.6 × 768/1216 = 2.27 against 256's 3.0 × 768/960 = 2.4.
  const GoodputChoice g =
      choose_by_goodput(kCurve, 64, noise(150, 100, 220), "raw", OptimizerKind::kAdamW);
  ASSERT_EQ(g.chosen, 256) << g.why;
  const double phi = phi_from_efficiency(0.8, 64, 256);
  EXPECT_NEAR(phi, 704, 1e-9);
  EXPECT_EQ(choose_above(g, 256, phi, OptimizerKind::kAdamW).chosen, 64) << "512 does not pay";
  // At φ 5000, 512 gives 3.6 × 5064/5512 = 3.31 against 256's 3.0 × 5064/5256 = 2.89: 14% more.
  const GoodputChoice up = choose_above(g, 256, 5000, OptimizerKind::kAdamW);
  EXPECT_EQ(up.chosen, 512) << up.why;
  EXPECT_EQ(up.phi_used, 5000);  // credited above the probe's upper end: a run measured it
  EXPECT_NEAR(up.predicted_speedup, 3.6 * 5064.0 / 5512.0, 1e-9);
  EXPECT_NEAR(up.lr_multiplier, std::sqrt(gain_ratio(5000, 64, 512)), 1e-9);
  EXPECT_NE(up.why.find("what the guard's runs measured"), std::string::npos) << up.why;
  // A gain under 5% over the accepted batch (512 at 3.3 × 0.919 = 3.03 vs 2.89) does not make a
  // choice on prediction alone, but the guard's search up, which trains it before taking it,
  // tries it; a batch predicted slower (3.1 × 0.919 = 2.85) it does not.
  const std::vector<std::pair<int64_t, double>> flat = {{64, 1000}, {256, 3000}, {512, 3300}};
  const GoodputChoice f = choose_by_goodput(flat, 64, noise(150, 100, 220), "raw",
                                            OptimizerKind::kAdamW);
  EXPECT_EQ(choose_above(f, 256, 5000, OptimizerKind::kAdamW).chosen, 64);
  EXPECT_EQ(choose_above(f, 256, 5000, OptimizerKind::kAdamW, kGoodputSearchUpGain).chosen, 512);
  const std::vector<std::pair<int64_t, double>> flatter = {{64, 1000}, {256, 3000}, {512, 3100}};
  const GoodputChoice f2 = choose_by_goodput(flatter, 64, noise(150, 100, 220), "raw",
                                             OptimizerKind::kAdamW);
  EXPECT_EQ(choose_above(f2, 256, 5000, OptimizerKind::kAdamW, kGoodputSearchUpGain).chosen, 64);
}

}  // namespace saturate
