// SPDX-License-Identifier: Apache-2.0
// saturate's batch-size search against hundreds of seeded SimulatedDevice profiles, and on
// hand-made profiles for the cases that matter: a cliff, a limit below one sample, preferring
// the smaller batch.
#include "saturate/tune/batch_search.h"

#include <algorithm>
#include <cstdio>

#include <gtest/gtest.h>

#include "saturate/core/error.h"
#include "saturate/tune/simulated_device.h"
#include "testing/error_of.h"

namespace saturate {
namespace {

RunConfig base_config() {
  RunConfig c;
  c.train.batch_size = 32;
  return c;
}

RunConfig with_batch(int64_t b) {
  RunConfig c = base_config();
  c.train.batch_size = b;
  return c;
}

// The best noise-free throughput over every batch whose worst-case peak stays under the limit
// less the reserve: the exhaustive grid the search must come close to.
struct GridBest {
  int64_t batch = 0;
  double samples_per_s = 0;
};

GridBest grid_best(const SimulatedProfile& p, double reserve, int64_t cap) {
  const auto target = static_cast<int64_t>(static_cast<double>(p.limit_bytes) * (1.0 - reserve));
  GridBest g;
  for (int64_t b = 1; b <= cap; ++b) {
    const RunConfig c = with_batch(b);
    if (p.worst_peak_memory_bytes(c) > target) break;  // memory grows with b
    const double s = p.true_samples_per_s(c);
    if (s > g.samples_per_s) g = {b, s};
  }
  return g;
}

}  // namespace

namespace {

struct SweepStats {
  int profiles = 0, with_cliff = 0, at_97 = 0;
  double worst_ratio = 1.0;
  int64_t steps = 0, worst_steps = 0;
};

// Searches `n` seeded profiles and checks the invariants every run must keep: the chosen batch
// can never run out of memory, whatever the noise, and the steps reported are the steps run.
SweepStats sweep(int n, double max_step_noise) {
  SweepStats st;
  for (int seed = 0; seed < n; ++seed) {
    SCOPED_TRACE(seed);
    const SimulatedProfile p = SimulatedProfile::random(seed, max_step_noise);
    SimulatedDevice device(p, /*seed=*/seed + 1000);
    const BatchSearchOptions o;
    const BatchSearchResult r = search_batch_size(device, base_config(), o);
    const RunConfig chosen = with_batch(r.chosen);
    SCOPED_TRACE(p.describe() + " -> " + r.why);
    EXPECT_LE(p.worst_peak_memory_bytes(chosen), p.limit_bytes);
    const GridBest g = grid_best(p, o.reserve, std::min(o.max_batch, p.dataset_size));
    EXPECT_GT(g.batch, 0);
    const double ratio = p.true_samples_per_s(chosen) / g.samples_per_s;
    int64_t steps = 0;
    for (const auto& t : r.trials) steps += t.outcome.steps_run;
    EXPECT_EQ(r.steps, steps);
    if (ratio < 0.97)
      std::printf("  seed %d: %.4f of the grid best (%s; chose %lld, grid best %lld)\n", seed, ratio,
                  p.describe().c_str(), static_cast<long long>(r.chosen),
                  static_cast<long long>(g.batch));
    ++st.profiles;
    st.with_cliff += p.cliff_batch > 0 ? 1 : 0;
    st.at_97 += ratio >= 0.97 ? 1 : 0;
    st.worst_ratio = std::min(st.worst_ratio, ratio);
    st.steps += r.steps;
    st.worst_steps = std::max(st.worst_steps, r.steps);
  }
  std::printf("%d profiles (%d with a cliff, step noise up to %.0f%%): %d at >= 97%% of the grid "
              "best, worst %.4f; %.1f probe steps on average, %lld at most\n",
              st.profiles, st.with_cliff, 100 * max_step_noise, st.at_97, st.worst_ratio,
              static_cast<double>(st.steps) / st.profiles, static_cast<long long>(st.worst_steps));
  return st;
}

}  // namespace

// Steady device steps (per-step noise 0.5-3%): at least 99% of profiles within 3% of the
// exhaustive grid's best, none worse than 5%. (Two timed steps per point cannot separate a 3%
// difference on a flat top every time; bench/tune_bench.cpp reports the full distribution.)
TEST(BatchSearch, Issue5_HundredsOfSimulatedProfilesNeverOomAndComeWithin3PercentOfTheGrid) {
  const SweepStats st = sweep(300, 0.03);
  EXPECT_GE(st.at_97, st.profiles * 99 / 100);
  EXPECT_GE(st.worst_ratio, 0.95);
  EXPECT_LE(st.steps / st.profiles, 30);
}

// A noisy host (up to 8% per step, like two shared CPU cores): the search still never runs out
// of memory, 95% of profiles are within 3% and none is worse than 10%.
TEST(BatchSearch, NoisyProfilesStayWithinTenPercentOfTheGrid) {
  const SweepStats st = sweep(300, 0.08);
  EXPECT_GE(st.worst_ratio, 0.90);
  EXPECT_GE(st.at_97, st.profiles * 95 / 100);
}

TEST(BatchSearch, Issue5_PicksTheFasterBatchWhenThroughputFallsPastACliff) {
  SimulatedProfile p;
  p.limit_bytes = 16LL << 30;
  p.fixed_bytes = 1LL << 30;
  p.per_sample_bytes = 4LL << 20;  // about 3400 samples fit under the reserve
  p.half_batch = 8;
  p.cliff_batch = 256;
  p.cliff_loss_per_doubling = 0.3;
  p.step_noise = 0.02;
  SimulatedDevice device(p, 7);
  const BatchSearchResult r = search_batch_size(device, base_config());
  EXPECT_GT(r.largest_safe, 3000);
  EXPECT_GE(r.chosen, 128);
  EXPECT_LE(r.chosen, 512);
  EXPECT_GT(r.samples_per_s, 1.5 * p.true_samples_per_s(with_batch(r.largest_safe)));
  EXPECT_NE(r.why.find("faster than the largest safe batch"), std::string::npos) << r.why;
}

TEST(BatchSearch, LargestSafeBatchStaysUnderTheReserveAndIsFoundFromAFewProbes) {
  SimulatedProfile p;
  p.limit_bytes = 8LL << 30;
  p.fixed_bytes = 2LL << 30;
  p.per_sample_bytes = 16LL << 20;  // (8 GiB × 0.9 − 2 GiB) / 16 MiB ≈ 332
  p.memory_noise = 0.0;
  p.half_batch = 1;  // throughput flat: the top is as good as anything
  SimulatedDevice device(p, 3);
  BatchSearchOptions o;
  const BatchSearchResult r = search_batch_size(device, base_config(), o);
  const int64_t target = static_cast<int64_t>(0.9 * static_cast<double>(p.limit_bytes));
  // The prediction aims 1% under the target (room for peak noise), so the largest safe batch
  // is within 2% of the exact largest.
  int64_t exact = 1;
  while (p.worst_peak_memory_bytes(with_batch(exact + 1)) <= target) ++exact;
  EXPECT_LE(p.worst_peak_memory_bytes(with_batch(r.largest_safe)), target);
  EXPECT_GE(r.largest_safe, exact * 98 / 100);
  EXPECT_EQ(r.predicted, r.largest_safe) << "a linear memory model predicts exactly";
  EXPECT_EQ(r.ooms, 0);
  EXPECT_NEAR(r.bytes_per_sample, static_cast<double>(p.per_sample_bytes), 1.0);
  // Two one-step memory probes, then measurements: far fewer than doubling from 2 would take.
  EXPECT_EQ(r.trials[0].purpose, "memory probe");
  EXPECT_EQ(r.trials[1].purpose, "memory probe");
  EXPECT_LE(r.steps, 30);
}

TEST(BatchSearch, SuperLinearMemoryIsVerifiedAndNeverChosenPastTheLimit) {
  SimulatedProfile p;
  p.limit_bytes = 8LL << 30;
  p.fixed_bytes = 1LL << 30;
  p.per_sample_bytes = 4LL << 20;
  p.memory_superlinear = 0.5;  // at batch 1024 memory per sample is 1.5× the small-batch rate
  p.half_batch = 1;
  SimulatedDevice device(p, 5);
  const BatchSearchResult r = search_batch_size(device, base_config());
  EXPECT_LE(p.worst_peak_memory_bytes(with_batch(r.chosen)), p.limit_bytes);
  EXPECT_GT(r.largest_safe, 500);
}

TEST(BatchSearch, PreferSmallerTakesTheSmallestWithinTolerance) {
  SimulatedProfile p;
  p.limit_bytes = 16LL << 30;
  p.fixed_bytes = 1LL << 30;
  p.per_sample_bytes = 8LL << 20;
  p.half_batch = 2;  // 97% of the plateau from batch ~64
  p.step_noise = 0.005;
  SimulatedDevice faster_dev(p, 11), smaller_dev(p, 11);
  BatchSearchOptions o;
  const BatchSearchResult faster = search_batch_size(faster_dev, base_config(), o);
  o.prefer = Prefer::kSmaller;
  const BatchSearchResult smaller = search_batch_size(smaller_dev, base_config(), o);
  EXPECT_LT(smaller.chosen, faster.chosen / 4);
  EXPECT_GE(p.true_samples_per_s(with_batch(smaller.chosen)),
            0.96 * p.true_samples_per_s(with_batch(faster.chosen)));
  EXPECT_NE(smaller.why.find("smallest within"), std::string::npos) << smaller.why;
}

TEST(BatchSearch, Issue5_ALimitBelowOneSampleIsAClearError) {
  SimulatedProfile p;
  p.limit_bytes = 1LL << 30;
  p.fixed_bytes = 900LL << 20;
  p.per_sample_bytes = 200LL << 20;
  SimulatedDevice device(p, 1);
  const std::string e = testing::error_of([&] { search_batch_size(device, base_config()); });
  EXPECT_NE(e.find("one sample does not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("--memory-limit"), std::string::npos) << e;
}

TEST(BatchSearch, RespectsTheRunnersBatchCap) {
  SimulatedProfile p;
  p.dataset_size = 100;  // memory would allow thousands
  p.half_batch = 1;
  SimulatedDevice device(p, 2);
  const BatchSearchResult r = search_batch_size(device, base_config());
  EXPECT_EQ(r.largest_safe, 100);
  for (const auto& t : r.trials) EXPECT_LE(t.config.train.batch_size, 100);
}

TEST(Prefer, ParsesAndRejects) {
  EXPECT_EQ(parse_prefer("faster"), Prefer::kFaster);
  EXPECT_EQ(parse_prefer("smaller"), Prefer::kSmaller);
  EXPECT_NE(testing::error_of([] { parse_prefer("fast"); }).find("--prefer"), std::string::npos);
}

}  // namespace saturate
