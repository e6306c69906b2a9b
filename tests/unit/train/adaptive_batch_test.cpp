// SPDX-License-Identifier: Apache-2.0
// --adaptive-batch: the doubling rule against hand-worked goodput, and the Trainer growing its
// batch on the frozen problem of testing/noise_truth.h, whose noise scale is known exactly
// (from every sample's own gradient), so which doublings pay is known before the run.
#include "saturate/train/adaptive_batch.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "saturate/core/error.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/train/trainer.h"
#include "testing/noise_truth.h"
#include "testing/sgd_steps.h"

namespace saturate {
namespace {

NoiseScaleEstimate estimate(double phi, double low, int64_t steps = 100) {
  NoiseScaleEstimate n;
  n.phi = phi;
  n.low = low;
  n.high = 2 * phi;
  n.steps = steps;
  return n;
}

AdaptiveBatchRule rule(std::vector<std::pair<int64_t, double>> curve,
                       OptimizerKind opt = OptimizerKind::kSgd) {
  AdaptiveBatchRule r;
  r.b0 = 64;
  r.curve = std::move(curve);
  r.optimizer = opt;
  return r;
}

TEST(AdaptiveBatch, DoublesOnlyWhenThroughputTimesEfficiencyPays) {
  const AdaptiveBatchRule r = rule({{64, 1000}, {128, 1900}, {256, 2400}});
  // φ credited 200: 128 gives 1.9 × 264/328 = 1.53; from 128, 256 gives 1.263 × 328/456 = 0.91.
  const auto c = next_batch_change(r, 64, estimate(300, 200), /*step=*/50);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->to, 128);
  EXPECT_NEAR(c->predicted_speedup, 1.9 * 264.0 / 328.0, 1e-9);
  EXPECT_NEAR(c->gain, 128.0 * 264.0 / (64.0 * 328.0), 1e-9);
  EXPECT_NEAR(c->lr_multiplier, c->gain, 1e-12);  // SGD: r itself
  EXPECT_FALSE(next_batch_change(r, 128, estimate(300, 200), 100).has_value());
  // A larger φ later in training makes 256 pay: 1.263 × 1128/1256 = 1.13.
  const auto later = next_batch_change(r, 128, estimate(1500, 1000), 500);
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->to, 256);
  // AdamW: the square root of the gain, from the starting batch 64.
  const auto adam = next_batch_change(rule(r.curve, OptimizerKind::kAdamW), 128,
                                      estimate(1500, 1000), 500);
  ASSERT_TRUE(adam.has_value());
  EXPECT_NEAR(adam->lr_multiplier, std::sqrt(256.0 * 1064.0 / (64.0 * 1256.0)), 1e-9);
}

TEST(AdaptiveBatch, NeverGrowsPastWhatWasMeasuredOrWithoutAResolvedLowerBound) {
  const AdaptiveBatchRule r = rule({{64, 1000}, {128, 3000}});
  EXPECT_FALSE(next_batch_change(r, 128, estimate(1e6, 1e6), 10).has_value());  // 256 unmeasured
  EXPECT_FALSE(next_batch_change(r, 64, estimate(300, NAN), 10).has_value());
  EXPECT_FALSE(next_batch_change(r, 64, estimate(300, 200, kNoiseMinSteps - 1), 10).has_value());
  EXPECT_TRUE(next_batch_change(r, 64, estimate(300, 200), 10).has_value());
  // Two ranks: φ is in global samples, so the efficiency is taken at 2 × the batch.
  AdaptiveBatchRule two = rule({{64, 1000}, {128, 1250}});
  EXPECT_TRUE(next_batch_change(two, 64, estimate(3000, 2000), 10).has_value());  // 1.25 × 0.97
  two.world = 8;  // 1.25 × (2000 + 512)/(2000 + 1024) = 1.04
  EXPECT_FALSE(next_batch_change(two, 64, estimate(3000, 2000), 10).has_value());
}

// The frozen problem and its truth (φ ≈ 31).
struct Frozen {
  DatasetSplits data = testing::make_noisy_pattern_splits();
  std::unique_ptr<Model> model = testing::warmed_linear_model(data);
  testing::NoiseTruth truth =
      testing::exact_noise(*model, data.train, data.normalize_mean, data.normalize_std);
};

TrainOptions adaptive(std::vector<std::pair<int64_t, double>> curve) {
  TrainOptions o = testing::sgd_steps(64, /*steps=*/400, /*lr=*/1e-30);
  o.momentum = 0;
  o.weight_decay = 0;
  o.adaptive_batch = true;
  o.adaptive_curve = std::move(curve);
  return o;
}

struct Changes : TelemetrySink {
  void on_step(const StepRecord& r) override { records.push_back(r); }
  void on_batch_change(int64_t step, int64_t batch, double m, const std::string& why) override {
    seen.push_back({step, batch, m});
    whys.push_back(why);
  }
  struct Seen {
    int64_t step, batch;
    double lr_multiplier;
  };
  std::vector<Seen> seen;
  std::vector<std::string> whys;
  std::vector<StepRecord> records;
};

TEST(AdaptiveBatch, TheTrainerDoublesWhereTheTrueNoiseScaleSaysItPays) {
  Frozen f;
  const double phi = f.truth.phi();
  ASSERT_GT(phi, 10);
  ASSERT_LT(phi, 60);
  // At the truth, 64 → 128 at 2× the samples/s pays ((φ+64)/(φ+128) × 2 ≈ 1.2), and
  // 128 → 256 at 1.5× does not (≈ 0.83): one doubling, whatever the estimate's scatter.
  const double first = 2.0 * (phi + 64) / (phi + 128), second = 1.5 * (phi + 128) / (phi + 256);
  ASSERT_GT(first, 1.1);
  ASSERT_LT(second, 0.95);
  Changes sink;
  Trainer t(*f.model, adaptive({{64, 1000}, {128, 2000}, {256, 3000}}), c10::Device("cpu"));
  const TrainSummary s = t.fit(f.data, &sink);
  ASSERT_EQ(s.batch_changes.size(), 1u);
  const BatchChange& c = s.batch_changes[0];
  EXPECT_EQ(c.from, 64);
  EXPECT_EQ(c.to, 128);
  EXPECT_LE(c.phi, phi * 1.1) << "the lower end credited";
  EXPECT_GT(c.phi, 0);
  // The sinks hear of it at the step it takes effect, and the steps from there are 128.
  ASSERT_EQ(sink.seen.size(), 1u);
  EXPECT_EQ(sink.seen[0].step, c.step);
  EXPECT_EQ(sink.seen[0].batch, 128);
  EXPECT_NE(sink.whys[0].find("predicted"), std::string::npos) << sink.whys[0];
  EXPECT_EQ(c.step % 50, 0);
  for (const StepRecord& r : sink.records) {
    EXPECT_EQ(r.samples, r.step < c.step ? 64 : 128) << r.step;
    // The gain rule's LR (constant schedule): base × r from the change on.
    const double want = 1e-30 * (r.step < c.step ? 1.0 : c.lr_multiplier);
    EXPECT_NEAR(r.lr / want, 1.0, 1e-9) << r.step;
  }
  EXPECT_GT(c.lr_multiplier, 1.0);
  EXPECT_LT(c.lr_multiplier, 2.0);
  // The run's length stays in samples: 400 steps of the starting 64.
  EXPECT_EQ(s.samples, 400 * 64);
  EXPECT_EQ(s.steps, c.step + (400 - c.step) / 2);
  // Steps of 128 that split in two keep measuring the noise scale (every 4th).
  int measured = 0;
  for (size_t i = sink.records.size() - 8; i < sink.records.size(); ++i)
    measured += std::isfinite(sink.records[i].gns) ? 1 : 0;
  EXPECT_EQ(measured, 2);
}

TEST(AdaptiveBatch, AFlatThroughputCurveKeepsTheBatchHoweverNoisyTheGradient) {
  Frozen f;
  Changes sink;
  Trainer t(*f.model, adaptive({{64, 1000}, {128, 1020}}), c10::Device("cpu"));
  const TrainSummary s = t.fit(f.data, &sink);
  EXPECT_TRUE(s.batch_changes.empty());
  EXPECT_TRUE(sink.seen.empty());
  EXPECT_EQ(s.steps, 400);
  EXPECT_GT(s.noise.steps, kNoiseMinSteps) << "measured all along, on every 4th step";
}

TEST(AdaptiveBatch, TheUsersOwnMicroBatchesStandWhenTheBatchGrows) {
  // --accumulate 2 at batch 64 (micro-batches of 32, perhaps for a memory limit the plan did not
  // see): the doubled step runs as 4 micro-batches of 32, not whole.
  Frozen f;
  Changes sink;
  TrainOptions o = adaptive({{64, 1000}, {128, 2000}, {256, 3000}});
  o.accumulate = 2;
  Trainer t(*f.model, o, c10::Device("cpu"));
  const TrainSummary s = t.fit(f.data, &sink);
  ASSERT_EQ(s.batch_changes.size(), 1u);
  const int64_t at = s.batch_changes[0].step;
  for (const StepRecord& r : sink.records)
    if (r.step >= at) {
      EXPECT_EQ(r.samples, 128);
      EXPECT_EQ(r.gns_b_small, 32) << "step " << r.step << " ran in other micro-batches";
    }
}

TEST(AdaptiveBatch, NeedsACurveAndTheNoiseScale) {
  TrainOptions o = adaptive({});
  EXPECT_THROW(o.validate(), Error);
  o = adaptive({{64, 1000}});
  o.noise_scale = false;
  EXPECT_THROW(o.validate(), Error);
}

}  // namespace
}  // namespace saturate
