// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/simulated_device.h"

#include <gtest/gtest.h>

namespace saturate {
namespace {

TrialRequest request(int64_t batch, int64_t steps = 5) {
  TrialRequest r;
  r.config.train.batch_size = batch;
  r.steps = steps;
  r.warmup_steps = 1;
  return r;
}

}  // namespace

TEST(SimulatedDevice, SameProfileAndSeedGiveTheSameAnswers) {
  const SimulatedProfile p = SimulatedProfile::random(4);
  SimulatedDevice a(p, 9), b(p, 9);
  const TrialOutcome x = a.run(request(16)), y = b.run(request(16));
  EXPECT_EQ(x.fits, y.fits);
  EXPECT_EQ(x.measurement.samples_per_s, y.measurement.samples_per_s);
  EXPECT_EQ(x.measurement.peak_memory_bytes, y.measurement.peak_memory_bytes);
}

TEST(SimulatedDevice, MemoryIsFixedPlusPerSampleAndPastTheLimitIsOutOfMemory) {
  SimulatedProfile p;
  p.limit_bytes = 10LL << 30;
  p.fixed_bytes = 2LL << 30;
  p.per_sample_bytes = 1LL << 30;
  p.memory_noise = 0.0;
  SimulatedDevice d(p, 1);
  const TrialOutcome fits = d.run(request(8));
  ASSERT_TRUE(fits.fits);
  EXPECT_EQ(fits.measurement.peak_memory_bytes, 10LL << 30);
  EXPECT_EQ(fits.steps_run, 5);
  const TrialOutcome oom = d.run(request(9));
  EXPECT_FALSE(oom.fits);
  EXPECT_EQ(oom.steps_run, 1) << "the first step runs out of memory";
  // Accumulation holds one micro-batch at a time.
  TrialRequest acc = request(16);
  acc.config.train.accumulate = 2;
  EXPECT_TRUE(d.run(acc).fits);
}

TEST(SimulatedDevice, ThroughputSaturatesFallsPastTheCliffAndHasNoise) {
  SimulatedProfile p;
  p.half_batch = 16;
  p.cliff_batch = 256;
  p.cliff_loss_per_doubling = 0.25;
  p.step_noise = 0.05;
  RunConfig c;
  auto at = [&](int64_t b) {
    c.train.batch_size = b;
    return p.true_samples_per_s(c);
  };
  EXPECT_NEAR(at(16), p.peak_samples_per_s / 2, 1e-9);
  EXPECT_GT(at(256), at(64));
  EXPECT_NEAR(at(512), at(256) * 512.0 / (512 + 16) / (256.0 / (256 + 16)) * 0.75, 1e-6);
  SimulatedDevice d(p, 3);
  const TrialOutcome t = d.run(request(64, 21));
  ASSERT_TRUE(t.fits);
  EXPECT_EQ(t.measurement.step_samples_per_s.size(), 20u);
  EXPECT_GT(t.measurement.spread, 0.0);
  EXPECT_NEAR(t.measurement.samples_per_s, at(64), 0.05 * at(64));
}

TEST(SimulatedDevice, RandomProfilesArePlausible) {
  for (int seed = 0; seed < 200; ++seed) {
    const SimulatedProfile p = SimulatedProfile::random(seed);
    SCOPED_TRACE(p.describe());
    ASSERT_GT(p.fixed_bytes, 0);
    ASSERT_LT(p.fixed_bytes, p.limit_bytes);
    RunConfig one;
    one.train.batch_size = 1;
    EXPECT_LE(p.worst_peak_memory_bytes(one), p.limit_bytes);
    EXPECT_GT(p.true_samples_per_s(one), 0.0);
  }
}

}  // namespace saturate
