// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/noise_scale.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace saturate {
namespace {

// Gradients with a known answer: per-sample g = G + noise, with |G|² = `grad_sqr` spread over
// `dims` coordinates and independent N(0, trace/dims) noise in each, so tr(Σ) = `trace`. Each
// step draws `big` samples; the first `small` of them make the small batch.
NoiseScale simulate(double grad_sqr, double trace, int dims, int small, int big, int steps,
                    unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, std::sqrt(trace / dims));
  const double g = std::sqrt(grad_sqr / dims);
  NoiseScale gns;
  std::vector<double> sum(static_cast<size_t>(dims));
  for (int s = 0; s < steps; ++s) {
    std::fill(sum.begin(), sum.end(), 0.0);
    double small_sqr = 0;
    for (int i = 0; i < big; ++i) {
      for (double& v : sum) v += g + noise(rng);
      if (i + 1 == small)
        for (double v : sum) small_sqr += (v / small) * (v / small);
    }
    double big_sqr = 0;
    for (double v : sum) big_sqr += (v / big) * (v / big);
    auto sample = noise_sample({small_sqr, big_sqr, static_cast<double>(small),
                                static_cast<double>(big)});
    EXPECT_TRUE(sample.has_value());
    if (sample) gns.add(*sample, small, big);
  }
  return gns;
}

TEST(NoiseScale, EstimatesAKnownNoiseScaleWithinTenPercent) {
  // φ = 100 between the two batch sizes, as under 4 micro-batches of 64.
  const NoiseScale gns = simulate(/*grad_sqr=*/1.0, /*trace=*/100.0, 50, 64, 256, 600, 7);
  const NoiseScaleEstimate e = gns.estimate();
  EXPECT_EQ(e.steps, 300);  // the recent half
  EXPECT_NEAR(e.phi, 100.0, 10.0);
  EXPECT_LE(e.low, 100.0);
  EXPECT_GE(e.high, 100.0);
  EXPECT_TRUE(e.is_resolved());
  EXPECT_EQ(e.b_small, 64);
  EXPECT_EQ(e.b_big, 256);
  EXPECT_NEAR(gns.smoothed(), 100.0, 20.0);  // the last 200 steps
}

TEST(NoiseScale, PairsOfRanksAsWellAsMicroBatches) {
  // Two ranks of 128: the same identity with the other pair of sizes, φ = 300.
  const NoiseScaleEstimate e = simulate(0.5, 150.0, 40, 128, 256, 800, 11).estimate();
  EXPECT_NEAR(e.phi, 300.0, 30.0);
}

TEST(NoiseScale, NoSignalIsUnresolvedNotAHugeNumber) {
  // |G|² = 0: pure noise; φ has no upper bound and must not be acted on.
  const NoiseScaleEstimate e = simulate(0.0, 50.0, 20, 16, 64, 200, 3).estimate();
  EXPECT_TRUE(std::isinf(e.high));
  EXPECT_FALSE(e.is_resolved());
}

TEST(NoiseScale, FewStepsAreNotResolved) {
  const NoiseScaleEstimate e = simulate(1.0, 10.0, 20, 16, 64, kNoiseMinSteps - 1, 5).estimate();
  EXPECT_FALSE(e.is_resolved());
}

TEST(NoiseScale, RejectsWhatIsNotAPair) {
  EXPECT_FALSE(noise_sample({1.0, 0.5, 64, 64}).has_value());
  EXPECT_FALSE(noise_sample({1.0, 0.5, 0, 64}).has_value());
  EXPECT_FALSE(noise_sample({std::nan(""), 0.5, 16, 64}).has_value());
  EXPECT_FALSE(noise_sample({1.0, INFINITY, 16, 64}).has_value());
  // The identity: with s(B) = |G|² + tr/B exactly, the estimates are exact.
  auto s = noise_sample({2.0 + 100.0 / 16, 2.0 + 100.0 / 64, 16, 64});
  ASSERT_TRUE(s.has_value());
  EXPECT_NEAR(s->grad_sqr, 2.0, 1e-9);
  EXPECT_NEAR(s->trace, 100.0, 1e-9);
}

TEST(NoiseScale, AnEarlyOutlierLeavesTheSmoothedValue) {
  NoiseScale gns(/*horizon=*/10, /*window=*/100);
  gns.add({1.0, -1e12}, 16, 64);  // a wild first step
  for (int i = 0; i < 10; ++i) gns.add({1.0, 50.0}, 16, 64);
  EXPECT_NEAR(gns.smoothed(), 50.0, 1e-6);
}

TEST(NoiseScale, EfficiencyAndGainFollowPollux) {
  // φ = 500 from B0 = 64: at 6430 each sample is worth 8%, and a step 8.2 steps of 64.
  EXPECT_NEAR(batch_efficiency(500, 64, 6430), 564.0 / 6930.0, 1e-12);
  EXPECT_NEAR(gain_ratio(500, 64, 6430), 6430.0 * 564.0 / (64.0 * 6930.0), 1e-12);
  EXPECT_NEAR(gain_ratio(500, 64, 512), 2.0 * 512 / (64 * 1012.0) * 564.0 / 2.0, 1e-9);
  EXPECT_EQ(batch_efficiency(500, 64, 64), 1.0);
  EXPECT_EQ(batch_efficiency(INFINITY, 64, 1024), 1.0);
  EXPECT_EQ(gain_ratio(INFINITY, 64, 1024), 16.0);
  EXPECT_NEAR(gain_ratio(0.0, 64, 1024), 1.0, 1e-12);
  EXPECT_TRUE(std::isnan(batch_efficiency(std::nan(""), 64, 128)));
}

}  // namespace
}  // namespace saturate
