// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/throughput.h"

#include <gtest/gtest.h>

namespace saturate {
namespace {

std::vector<StepRecord> steps(const std::vector<double>& ms, int64_t samples = 10) {
  std::vector<StepRecord> out;
  for (double m : ms) {
    StepRecord r;
    r.samples = samples;
    r.step_ms = m;
    out.push_back(r);
  }
  return out;
}

}  // namespace

TEST(SteadyThroughput, ExcludesWarmupAndTakesTheMedianWindow) {
  // Warm-up of 2 slow steps, then windows of 2 steps at 10 ms, 10 ms and 20 ms per step.
  const auto r = steady_throughput(steps({500, 300, 10, 10, 10, 10, 20, 20}), 2, 2);
  EXPECT_EQ(r.steps, 6);
  EXPECT_EQ(r.windows, 3);
  EXPECT_DOUBLE_EQ(r.samples_per_s, 1000.0);  // median of 1000, 1000, 500
  EXPECT_DOUBLE_EQ(r.mean_samples_per_s, 60.0 / 0.080);
  EXPECT_DOUBLE_EQ(r.spread_pct, 0.0);  // two of three windows agree exactly
}

TEST(SteadyThroughput, SpreadGrowsWithDisagreement) {
  const auto steady = steady_throughput(steps({10, 10, 10, 10, 10, 10}), 0, 2);
  const auto noisy = steady_throughput(steps({10, 10, 14, 14, 7, 7, 12, 12}), 0, 2);
  EXPECT_DOUBLE_EQ(steady.spread_pct, 0.0);
  EXPECT_GT(noisy.spread_pct, 5.0);
}

TEST(SteadyThroughput, FoldsAShortTailIntoThePreviousWindow) {
  const auto r = steady_throughput(steps({10, 10, 10, 10, 10}), 0, 4);  // 4 + 1
  EXPECT_EQ(r.windows, 1);
  EXPECT_EQ(r.steps, 5);
}

TEST(SteadyThroughput, UsesEverythingWhenWarmupLeavesNothing) {
  const auto r = steady_throughput(steps({10, 20}), 5, 0);
  EXPECT_EQ(r.steps, 2);
  EXPECT_DOUBLE_EQ(r.samples_per_s, 20.0 / 0.030);
  EXPECT_EQ(steady_throughput({}, 0, 5).windows, 0);
}

}  // namespace saturate
