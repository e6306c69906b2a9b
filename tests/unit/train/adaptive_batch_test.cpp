// SPDX-License-Identifier: Apache-2.0
// --adaptive-batch: the doubling rule against hand-worked goodput, and the Trainer growing its
// batch on the frozen problem of testing/noise_truth.h, whose noise scale is known exactly
// (from every sample's own gradient), so which doublings pay is known before the run.
#include "saturate/train/adaptive_batch.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/models/model.h"
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
  o.noise_scale_budget = 1;  // every step measured: each record shows its micro-batches
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

TEST(AdaptiveBatch, NeedsTheNoiseScaleButNotACurve) {
  TrainOptions o = adaptive({});
  EXPECT_NO_THROW(o.validate()) << "without a plan's curve the run measures its own";
  o = adaptive({{64, 1000}});
  o.noise_scale = false;
  EXPECT_THROW(o.validate(), Error);
}

TEST(AdaptiveBatch, WithoutACurveADoublingIsTriedWhenItCouldPayAndUndoneInNumbers) {
  AdaptiveBatchRule r = rule({{64, 1000}});
  // φ credited 200: each sample of 128 is worth 264/328 = 0.80, so at twice the samples/s the
  // doubling would give 1.61: worth trying, and it pays if it runs ≥ 1.05/0.80 = 1.30×.
  const auto t = next_batch_trial(r, 64, estimate(300, 200), 50);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->kind, "try");
  EXPECT_EQ(t->to, 128);
  EXPECT_NEAR(t->predicted_speedup, 2 * 264.0 / 328.0, 1e-9);
  EXPECT_NE(t->why.find("1.30×"), std::string::npos) << t->why;
  EXPECT_NEAR(t->lr_multiplier, t->gain, 1e-12);
  // φ credited 5: each sample of 128 is worth 69/133 = 0.52; even 2× the samples/s gives 1.04.
  EXPECT_FALSE(next_batch_trial(r, 64, estimate(10, 5), 50).has_value());
  // Not without the current batch measured, nor once 128 is measured (then the rule decides).
  EXPECT_FALSE(next_batch_trial(rule({}), 64, estimate(300, 200), 50).has_value());
  r.curve.emplace_back(128, 1100);
  EXPECT_FALSE(next_batch_trial(r, 64, estimate(300, 200), 50).has_value());
  // Measured 1.1×: 1.1 × 0.80 = 0.89, so the trial is undone, back to the LR before it.
  EXPECT_FALSE(next_batch_change(r, 64, estimate(300, 200), 100).has_value());
  const BatchChange u = undo_batch_trial(r, 128, estimate(300, 200), 100, 1.0);
  EXPECT_EQ(u.kind, "undo");
  EXPECT_EQ(u.from, 128);
  EXPECT_EQ(u.to, 64);
  EXPECT_EQ(u.lr_multiplier, 1.0);
  EXPECT_NEAR(u.predicted_speedup, 1.1 * 264.0 / 328.0, 1e-9);
  EXPECT_NE(u.why.find("1.10× the samples/s of 64"), std::string::npos) << u.why;
}

// The linear model with extra compute beside it whose output is multiplied by 0, so the
// gradient, and the noise truth, are the linear model's. kPerSample: every sample costs the same
// (doubling the batch nearly doubles the step time: samples/s barely moves). kPerStep: a fixed
// cost per step, as when a small model's step is launch- or overhead-bound (doubling the batch
// nearly doubles samples/s).
class ExtraWork final : public Model {
 public:
  enum Kind { kPerSample, kPerStep };
  ExtraWork(std::unique_ptr<Model> inner, int64_t in_features, Kind kind)
      : inner_(std::move(inner)), kind_(kind),
        w_(torch::randn({in_features, 256}) / std::sqrt(static_cast<double>(in_features))),
        w2_(torch::randn({256, 256}) / 16.0), fixed_(torch::randn({192, in_features})) {}
  std::string name() const override { return "extra-work"; }
  at::Tensor forward(const at::Tensor& x) override {
    const at::Tensor rows = kind_ == kPerSample ? x.flatten(1).detach() : fixed_;
    at::Tensor h = torch::tanh(rows.matmul(w_));
    for (int i = 0; i < 4; ++i) h = torch::tanh(h.matmul(w2_));
    const at::Tensor extra = kind_ == kPerSample ? h.sum(1, /*keepdim=*/true) : h.sum();
    return inner_->forward(x) + 0.0 * extra;
  }
  std::vector<at::Tensor> parameters() override { return inner_->parameters(); }
  std::vector<at::Tensor> state_tensors() override { return inner_->state_tensors(); }
  void train(bool on) override { inner_->train(on); }
  bool is_training() const override { return inner_->is_training(); }
  void to(const c10::Device& d) override { inner_->to(d); }

 private:
  std::unique_ptr<Model> inner_;
  Kind kind_;
  at::Tensor w_, w2_, fixed_;
};

int64_t features_of(const TensorDataset& d) {
  int64_t n = 1;
  for (int64_t v : d.sample_shape()) n *= v;
  return n;
}

TEST(AdaptiveBatch, WithoutACurveATriedBatchThatRunsNoFasterIsUndoneAndNotTriedAgain) {
  // At the truth φ ≈ 31, each sample of 128 is worth (φ + 64)/(φ + 128) ≈ 0.6 of one of 64: the
  // doubling is tried (at 2× the samples/s it would pay), but this model's per-sample compute
  // keeps 128 near 64's samples/s, and it needs ≥ 1.7×.
  Frozen f;
  ASSERT_LT(f.truth.phi(), 60);
  ExtraWork model(std::move(f.model), features_of(f.data.train), ExtraWork::kPerSample);
  TrainOptions o = adaptive({});
  o.steps = 300;
  Changes sink;
  Trainer t(model, o, c10::Device("cpu"));
  const TrainSummary s = t.fit(f.data, &sink);
  ASSERT_EQ(s.batch_changes.size(), 2u) << (s.batch_changes.empty() ? "" : s.batch_changes[0].why);
  const BatchChange& tried = s.batch_changes[0];
  const BatchChange& undone = s.batch_changes[1];
  EXPECT_EQ(tried.kind, "try");
  EXPECT_EQ(tried.to, 128);
  EXPECT_EQ(undone.kind, "undo") << undone.why;
  EXPECT_EQ(undone.to, 64);
  EXPECT_EQ(undone.step, tried.step + 50);
  EXPECT_LT(undone.predicted_speedup, 1.05) << undone.why;
  EXPECT_EQ(undone.lr_multiplier, 1.0);
  ASSERT_EQ(sink.seen.size(), 2u);
  for (const StepRecord& r : sink.records) {
    const bool at_128 = r.step >= tried.step && r.step < undone.step;
    EXPECT_EQ(r.samples, at_128 ? 128 : 64) << r.step;
    EXPECT_NEAR(r.lr / 1e-30, at_128 ? tried.lr_multiplier : 1.0, 1e-9) << r.step;
  }
  EXPECT_EQ(s.samples, 300 * 64) << "the run's length stays in samples";
}

TEST(AdaptiveBatch, WithoutACurveATriedBatchThatPaysIsKept) {
  // Labels far noisier (φ in the hundreds at the truth) and a step of mostly fixed cost: 32 runs
  // at nearly twice the samples/s of 16, which pays at any φ the estimate can credit that makes
  // the trial worth it (it pays if it runs ≥ 2(φ + 16)/(φ + 32) × 1.05 / 2 ... < 2×).
  DatasetSplits data = testing::make_very_noisy_pattern_splits();
  std::unique_ptr<Model> linear = testing::warmed_linear_model(data);
  const double phi =
      testing::exact_noise(*linear, data.train, data.normalize_mean, data.normalize_std).phi();
  ASSERT_GT(phi, 150);
  ExtraWork model(std::move(linear), features_of(data.train), ExtraWork::kPerStep);
  TrainOptions o = adaptive({});
  o.batch_size = 16;
  o.steps = 1000;
  Changes sink;
  Trainer t(model, o, c10::Device("cpu"));
  const TrainSummary s = t.fit(data, &sink);
  ASSERT_FALSE(s.batch_changes.empty());
  EXPECT_EQ(s.batch_changes[0].kind, "try");
  EXPECT_EQ(s.batch_changes[0].to, 32);
  ASSERT_GT(s.batch_changes.size(), 1u) << "the run ended while 32 was still being tried";
  EXPECT_NE(s.batch_changes[1].kind, "undo") << s.batch_changes[1].why;
  EXPECT_EQ(s.batch_changes[1].from, 32) << "32 was kept: the next change starts from it";
  EXPECT_EQ(s.samples, 1000 * 16);
}

}  // namespace
}  // namespace saturate
