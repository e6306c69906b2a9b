// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/baselines.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/tune/simulated_device.h"

namespace saturate {
namespace {

// Memory fits iff batch <= fits_up_to; constant throughput. An out-of-memory trial reports
// `oom_steps` steps run, as a real runner reports the step it failed in.
class FitsUpTo : public TrialRunner {
 public:
  explicit FitsUpTo(int64_t fits_up_to, int64_t max_batch = 1 << 20, int64_t oom_steps = 1)
      : fits_up_to_(fits_up_to), max_batch_(max_batch), oom_steps_(oom_steps) {}

  TrialOutcome run(const TrialRequest& request) override {
    requests.push_back(request);
    const int64_t batch = request.config.train.batch_size;
    TrialOutcome t;
    t.fits = batch <= fits_up_to_;
    t.steps_run = t.fits ? request.steps : std::min(oom_steps_, request.steps);
    if (t.fits) {
      t.measurement.samples_per_s = 1000.0;
      t.measurement.peak_memory_bytes = batch * 1000;
    }
    return t;
  }
  QualityRun train_and_validate(const RunConfig&, int64_t) override {
    ADD_FAILURE() << "the baselines only run trials";
    return {};
  }
  int64_t memory_limit_bytes() const override { return fits_up_to_ * 1000; }
  int64_t max_batch_size() const override { return max_batch_; }

  std::vector<TrialRequest> requests;

 private:
  int64_t fits_up_to_, max_batch_, oom_steps_;
};

std::vector<int64_t> tried(const BaselineResult& r) {
  std::vector<int64_t> sizes;
  for (const SearchTrial& t : r.trials) sizes.push_back(t.config.train.batch_size);
  return sizes;
}

std::vector<std::string> purposes(const BaselineResult& r) {
  std::vector<std::string> p;
  for (const SearchTrial& t : r.trials) p.push_back(t.purpose);
  return p;
}

int64_t largest_fitting(const BaselineResult& r) {
  int64_t best = 0;
  for (const SearchTrial& t : r.trials)
    if (t.outcome.fits) best = std::max(best, t.config.train.batch_size);
  return best;
}

bool batch_one_fits(const SimulatedProfile& p) {
  RunConfig one;
  one.train.batch_size = 1;
  return p.worst_peak_memory_bytes(one) <= p.limit_bytes;
}

}  // namespace

TEST(LightningPower, DoublesUntilOutOfMemoryAndReturnsTheLastSizeThatFit) {
  FitsUpTo runner(100);
  RunConfig base;
  base.train.batch_size = 999;
  base.train.accumulate = 4;
  base.train.precision = Precision::kBf16;
  const BaselineResult r = lightning_power(runner, base);
  EXPECT_EQ(r.strategy, "lightning-power");
  EXPECT_EQ(r.chosen, 64) << "no margin in power mode";
  EXPECT_EQ(tried(r), (std::vector<int64_t>{2, 4, 8, 16, 32, 64, 128}));
  EXPECT_EQ(purposes(r).front(), "start");
  EXPECT_EQ(purposes(r).back(), "double");
  EXPECT_EQ(r.ooms, 1);
  EXPECT_EQ(r.steps, 6 * 3 + 1);
  ASSERT_EQ(runner.requests.size(), 7u);
  for (const TrialRequest& q : runner.requests) {
    EXPECT_EQ(q.steps, 3);
    EXPECT_EQ(q.warmup_steps, 0);
    EXPECT_EQ(q.config.train.accumulate, 1);
    EXPECT_EQ(q.config.train.precision, Precision::kBf16) << "other settings ride along";
  }
}

TEST(LightningPower, KeepsHalvingWhileNothingHasFit) {
  FitsUpTo runner(5);
  LightningOptions o;
  o.init_val = 64;
  const BaselineResult r = lightning_power(runner, RunConfig{}, o);
  EXPECT_EQ(tried(r), (std::vector<int64_t>{64, 32, 16, 8, 4, 8}));
  EXPECT_EQ(purposes(r)[1], "halve");
  EXPECT_EQ(r.chosen, 4);
  EXPECT_EQ(r.ooms, 5);
}

TEST(LightningPower, ReturnsZeroWhenEvenBatchOneRunsOutOfMemory) {
  FitsUpTo runner(0);
  const BaselineResult r = lightning_power(runner, RunConfig{});
  EXPECT_EQ(tried(r), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(r.chosen, 0);
  EXPECT_EQ(r.ooms, 2);
  EXPECT_EQ(r.steps, 2);
}

TEST(LightningPower, StopsAtMaxValAndReturnsItUntried) {
  FitsUpTo runner(1000);
  LightningOptions o;
  o.max_val = 64;
  const BaselineResult r = lightning_power(runner, RunConfig{}, o);
  EXPECT_EQ(tried(r), (std::vector<int64_t>{2, 4, 8, 16, 32}));
  EXPECT_EQ(r.chosen, 64);
  EXPECT_EQ(r.ooms, 0);
}

TEST(LightningPower, MaxTrialsCountsEveryTrial) {
  FitsUpTo fits_large(1000);
  LightningOptions o;
  o.max_trials = 4;
  const BaselineResult up = lightning_power(fits_large, RunConfig{}, o);
  EXPECT_EQ(tried(up), (std::vector<int64_t>{2, 4, 8, 16}));
  EXPECT_EQ(up.chosen, 16) << "out of trials: the last size that fit";

  FitsUpTo fits_small(3);
  o.init_val = 16;
  o.max_trials = 3;
  const BaselineResult down = lightning_power(fits_small, RunConfig{}, o);
  EXPECT_EQ(tried(down), (std::vector<int64_t>{16, 8, 4}));
  EXPECT_EQ(down.chosen, 2) << "as Lightning: the next halving, untried";
}

TEST(LightningPower, StopsAtTheRunnersMaxBatchSize) {
  FitsUpTo runner(1000, /*max_batch=*/48);
  const BaselineResult r = lightning_power(runner, RunConfig{});
  EXPECT_EQ(tried(r), (std::vector<int64_t>{2, 4, 8, 16, 32, 48}));
  EXPECT_EQ(r.chosen, 48);

  FitsUpTo fails_at_cap(40, /*max_batch=*/48);
  const BaselineResult capped_oom = lightning_power(fails_at_cap, RunConfig{});
  EXPECT_EQ(tried(capped_oom), (std::vector<int64_t>{2, 4, 8, 16, 32, 48}));
  EXPECT_EQ(capped_oom.chosen, 32) << "the last size that fit, not half of 48";

  FitsUpTo small_set(1000, /*max_batch=*/48);
  LightningOptions o;
  o.init_val = 500;
  const BaselineResult from_above = lightning_power(small_set, RunConfig{}, o);
  EXPECT_EQ(tried(from_above), (std::vector<int64_t>{48}));
  EXPECT_EQ(from_above.chosen, 48);
}

TEST(LightningPower, ReturnsTheLargestPowerOfTwoThatFits) {
  for (int64_t n = 1; n <= 3000; n += 7) {
    FitsUpTo runner(n);
    const BaselineResult r = lightning_power(runner, RunConfig{});
    int64_t expected = 1;
    while (expected * 2 <= n) expected *= 2;
    EXPECT_EQ(r.chosen, expected) << "fits up to " << n;
  }
}

TEST(LightningBinsearch, DoublesThenBisectsAndAppliesTheMargin) {
  FitsUpTo runner(100);
  const BaselineResult r = lightning_binsearch(runner, RunConfig{});
  EXPECT_EQ(r.strategy, "lightning-binsearch");
  EXPECT_EQ(tried(r),
            (std::vector<int64_t>{2, 4, 8, 16, 32, 64, 128, 96, 112, 104, 100, 102, 101}));
  EXPECT_EQ(purposes(r)[7], "bisect");
  EXPECT_EQ(r.chosen, 95) << "int(100 * (1 - 0.05))";
  EXPECT_EQ(r.ooms, 5);
  EXPECT_EQ(r.steps, 8 * 3 + 5 * 1);
}

TEST(LightningBinsearch, WithoutMarginFindsExactlyTheLargestSizeThatFits) {
  LightningOptions o;
  o.margin = 0.0;
  for (int64_t n = 1; n <= 3000; n += 7) {
    FitsUpTo runner(n);
    EXPECT_EQ(lightning_binsearch(runner, RunConfig{}, o).chosen, n) << "fits up to " << n;
  }
}

TEST(LightningBinsearch, FirstTrialOutOfMemoryBisectsDownToTheAssumedOne) {
  FitsUpTo runner(0);
  const BaselineResult r = lightning_binsearch(runner, RunConfig{});
  EXPECT_EQ(tried(r), (std::vector<int64_t>{2}));
  EXPECT_EQ(r.chosen, 1) << "Lightning assumes batch 1 fits and never tries it";

  FitsUpTo none_fit(0);
  LightningOptions o;
  o.init_val = 64;
  const BaselineResult from_64 = lightning_binsearch(none_fit, RunConfig{}, o);
  EXPECT_EQ(tried(from_64), (std::vector<int64_t>{64, 32, 16, 8, 4, 2}));
  EXPECT_EQ(from_64.chosen, 1);
  EXPECT_EQ(from_64.ooms, 6);
}

TEST(LightningBinsearch, StopsAtMaxValAndAppliesTheMargin) {
  FitsUpTo runner(1000);
  LightningOptions o;
  o.max_val = 64;
  const BaselineResult r = lightning_binsearch(runner, RunConfig{}, o);
  EXPECT_EQ(tried(r), (std::vector<int64_t>{2, 4, 8, 16, 32}));
  EXPECT_EQ(r.chosen, 60) << "int(64 * 0.95)";
}

TEST(LightningBinsearch, MaxTrialsCountsSuccessesOnly) {
  FitsUpTo runner(100);
  LightningOptions o;
  o.max_trials = 7;
  const BaselineResult r = lightning_binsearch(runner, RunConfig{}, o);
  EXPECT_EQ(tried(r), (std::vector<int64_t>{2, 4, 8, 16, 32, 64, 128, 96}));
  EXPECT_EQ(r.ooms, 1);
  EXPECT_EQ(r.chosen, 91) << "int(96 * 0.95)";
}

TEST(LightningBinsearch, StopsAtTheRunnersMaxBatchSize) {
  FitsUpTo runner(1000, /*max_batch=*/48);
  const BaselineResult r = lightning_binsearch(runner, RunConfig{});
  EXPECT_EQ(tried(r), (std::vector<int64_t>{2, 4, 8, 16, 32, 48}));
  EXPECT_EQ(r.chosen, 45) << "int(48 * 0.95)";
}

TEST(LightningBinsearch, RejectsInvalidOptions) {
  FitsUpTo runner(100);
  LightningOptions bad_margin;
  bad_margin.margin = 1.0;
  EXPECT_THROW(lightning_binsearch(runner, RunConfig{}, bad_margin), Error);
  LightningOptions bad_init;
  bad_init.init_val = 0;
  EXPECT_THROW(lightning_power(runner, RunConfig{}, bad_init), Error);
  LightningOptions bad_steps;
  bad_steps.steps_per_trial = 0;
  EXPECT_THROW(lightning_power(runner, RunConfig{}, bad_steps), Error);
  EXPECT_TRUE(runner.requests.empty());
}

TEST(AccelerateShrink, ShrinksByTenPercentAndStopsAtTheFirstFit) {
  FitsUpTo runner(100);
  const BaselineResult r = accelerate_shrink(runner, RunConfig{});
  EXPECT_EQ(r.strategy, "accelerate-shrink");
  EXPECT_EQ(tried(r), (std::vector<int64_t>{128, 115, 103, 92}));
  EXPECT_EQ(purposes(r), (std::vector<std::string>{"start", "shrink", "shrink", "shrink"}));
  EXPECT_EQ(r.chosen, 92);
  EXPECT_EQ(r.ooms, 3);
  EXPECT_EQ(r.steps, 3 * 1 + 3);
  for (const TrialRequest& q : runner.requests) {
    EXPECT_EQ(q.steps, 3);
    EXPECT_EQ(q.warmup_steps, 0);
  }
}

TEST(AccelerateShrink, NeverProbesUpward) {
  FitsUpTo runner(10000);
  const BaselineResult r = accelerate_shrink(runner, RunConfig{});
  EXPECT_EQ(tried(r), (std::vector<int64_t>{128}));
  EXPECT_EQ(r.chosen, 128) << "faithful: 10000 would fit, Accelerate never looks";
}

TEST(AccelerateShrink, ReturnsZeroWhenTheSizeReachesZero) {
  FitsUpTo runner(0);
  const BaselineResult r = accelerate_shrink(runner, RunConfig{});
  EXPECT_EQ(r.chosen, 0);
  ASSERT_EQ(r.trials.size(), 30u) << "128 -> 115 -> ... -> 1: 30 failures";
  EXPECT_EQ(r.trials.back().config.train.batch_size, 1);
  EXPECT_EQ(r.ooms, 30);
}

TEST(AccelerateShrink, StartsAtTheRunnersMaxBatchSize) {
  FitsUpTo runner(40, /*max_batch=*/50);
  const BaselineResult r = accelerate_shrink(runner, RunConfig{});
  EXPECT_EQ(tried(r), (std::vector<int64_t>{50, 45, 40}));
  EXPECT_EQ(r.chosen, 40);
  AccelerateOptions bad;
  bad.starting_batch_size = 0;
  EXPECT_THROW(accelerate_shrink(runner, RunConfig{}, bad), Error);
}

TEST(LightningAndAccelerateBaselines, StepsAndOutOfMemoryAreWhatTheRunnerCounted) {
  // Every strategy, through a CountingRunner, with 5 steps per trial and 2 run before an OOM.
  for (int which = 0; which < 3; ++which) {
    FitsUpTo fake(100, /*max_batch=*/1 << 20, /*oom_steps=*/2);
    CountingRunner counting(fake);
    LightningOptions lo;
    lo.steps_per_trial = 5;
    AccelerateOptions ao;
    ao.steps_per_trial = 5;
    const BaselineResult r = which == 0   ? lightning_power(counting, RunConfig{}, lo)
                             : which == 1 ? lightning_binsearch(counting, RunConfig{}, lo)
                                          : accelerate_shrink(counting, RunConfig{}, ao);
    const auto trials = static_cast<int64_t>(r.trials.size());
    EXPECT_EQ(r.steps, (trials - r.ooms) * 5 + r.ooms * 2) << r.strategy;
    EXPECT_EQ(r.steps, counting.steps()) << r.strategy;
    EXPECT_EQ(r.ooms, counting.out_of_memory()) << r.strategy;
    EXPECT_EQ(trials, counting.trials()) << r.strategy;
    EXPECT_GT(r.ooms, 0) << r.strategy;
  }
}

// On simulated devices peaks are noisy, so a size that fit once can fail later and none of the
// baselines guarantees a safe result. What does hold is checked here.
TEST(LightningPower, OnSimulatedDevicesReturnsASizeThatFitOrMaxVal) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const SimulatedProfile p = SimulatedProfile::random(seed);
    SimulatedDevice device(p, seed);
    const BaselineResult r = lightning_power(device, RunConfig{});
    if (batch_one_fits(p)) {
      EXPECT_GT(r.chosen, 0) << "seed " << seed;
    }
    EXPECT_LE(r.chosen, 8192) << "seed " << seed;
    if (r.chosen != 8192) {
      EXPECT_EQ(r.chosen, largest_fitting(r)) << "seed " << seed;
    }
  }
}

TEST(LightningBinsearch, OnSimulatedDevicesNeverExceedsTheLargestSizeThatFit) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const SimulatedProfile p = SimulatedProfile::random(seed);
    SimulatedDevice device(p, seed);
    const BaselineResult r = lightning_binsearch(device, RunConfig{});
    if (batch_one_fits(p)) {
      EXPECT_GT(r.chosen, 0) << "seed " << seed;
    }
    EXPECT_LE(r.chosen, 7782) << "int(8192 * 0.95); seed " << seed;
    if (r.chosen < 7782 && largest_fitting(r) > 0) {
      EXPECT_LE(r.chosen, largest_fitting(r)) << "seed " << seed;
    }
  }
}

TEST(AccelerateShrink, OnSimulatedDevicesReturnsItsLastTrialWhichFit) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const SimulatedProfile p = SimulatedProfile::random(seed);
    SimulatedDevice device(p, seed);
    const BaselineResult r = accelerate_shrink(device, RunConfig{});
    if (!batch_one_fits(p)) continue;
    ASSERT_FALSE(r.trials.empty());
    EXPECT_GT(r.chosen, 0) << "seed " << seed;
    EXPECT_LE(r.chosen, 128) << "seed " << seed;
    EXPECT_TRUE(r.trials.back().outcome.fits) << "seed " << seed;
    EXPECT_EQ(r.chosen, r.trials.back().config.train.batch_size) << "seed " << seed;
  }
}

}  // namespace saturate
