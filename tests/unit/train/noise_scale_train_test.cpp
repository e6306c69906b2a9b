// SPDX-License-Identifier: Apache-2.0
// The gradient noise scale measured inside Trainer's step, against the truth taken from every
// sample's own gradient at the same (frozen) weights.
#include <cmath>
#include <iostream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/train/trainer.h"
#include "testing/noise_truth.h"
#include "testing/sgd_steps.h"

namespace saturate {
namespace {

// The frozen problem of testing/noise_truth.h and its truth. One intra-op thread: the steps
// are tiny, and two of these tests at once under ctest --parallel on 2 cores, each with 2
// spinning OpenMP threads, took 75 ms a step instead of 1.
struct Frozen {
  Frozen() { torch::set_num_threads(1); }
  DatasetSplits data = testing::make_noisy_pattern_splits();
  std::unique_ptr<Model> model = testing::warmed_linear_model(data);
  testing::NoiseTruth truth =
      testing::exact_noise(*model, data.train, data.normalize_mean, data.normalize_std);
};

// Every step measured (the estimator against the truth), unless a test sets a budget.
TrainOptions frozen_steps(int64_t batch, int64_t accumulate, int64_t steps) {
  TrainOptions o = testing::sgd_steps(batch, steps, /*lr=*/1e-30);
  o.momentum = 0;
  o.weight_decay = 0;
  o.accumulate = accumulate;
  o.noise_scale_budget = 1;
  return o;
}

TEST(TrainerNoiseScale, UnderAccumulationItIsWithinTenPercentOfTheTruth) {
  Frozen f;
  ASSERT_GT(f.truth.grad_sqr, 0);
  Trainer t(*f.model, frozen_steps(256, 4, 800), c10::Device("cpu"));
  MemorySink sink;
  const TrainSummary s = t.fit(f.data, &sink);
  const NoiseScaleEstimate& e = s.noise;
  std::cout << "truth φ " << f.truth.phi() << ", measured " << e.phi << " (" << e.low << "–"
            << e.high << ")\n";
  EXPECT_EQ(e.b_small, 64);
  EXPECT_EQ(e.b_big, 256);
  EXPECT_EQ(e.steps, 400);
  EXPECT_NEAR(e.phi, f.truth.phi(), 0.1 * f.truth.phi())
      << "truth |G|² " << f.truth.grad_sqr << ", tr(Σ) " << f.truth.trace;
  EXPECT_LE(e.low, f.truth.phi());
  EXPECT_GE(e.high, f.truth.phi());
  EXPECT_TRUE(e.is_resolved());
  // Each step's own estimates are unbiased: their means over the run match the truth too.
  double sqr = 0, trace = 0;
  for (const StepRecord& r : sink.records()) {
    sqr += r.noise_grad_sqr;
    trace += r.noise_trace;
  }
  const double n = static_cast<double>(sink.records().size());
  EXPECT_NEAR(sqr / n, f.truth.grad_sqr, 0.1 * f.truth.grad_sqr);
  EXPECT_NEAR(trace / n, f.truth.trace, 0.1 * f.truth.trace);
  EXPECT_TRUE(std::isfinite(sink.records().back().gns));
  EXPECT_TRUE(std::isnan(sink.records().back().gns_precond));  // SGD has no preconditioner
}

TEST(TrainerNoiseScale, OneProcessWithoutAccumulationMeasuresNothing) {
  Frozen f;
  const TrainSummary s = Trainer(*f.model, frozen_steps(64, 1, 20), c10::Device("cpu")).fit(f.data);
  EXPECT_EQ(s.noise.steps, 0);
  TrainOptions off = frozen_steps(64, 4, 20);
  off.noise_scale = false;
  MemorySink sink;
  EXPECT_EQ(Trainer(*f.model, off, c10::Device("cpu")).fit(f.data, &sink).noise.steps, 0);
  EXPECT_TRUE(std::isnan(sink.records().back().noise_grad_sqr));
}

TEST(TrainerNoiseScale, AdamWGetsAPreconditionedValueToo) {
  Frozen f;
  TrainOptions o = frozen_steps(128, 2, 60);
  o.optimizer = OptimizerKind::kAdamW;
  MemorySink sink;
  const TrainSummary s = Trainer(*f.model, o, c10::Device("cpu")).fit(f.data, &sink);
  const auto& r = sink.records();
  // Every 4th step; before AdamW's 5th the moments are too young and the raw values stand in.
  EXPECT_EQ(r[0].noise_trace_precond, r[0].noise_trace);
  EXPECT_TRUE(std::isnan(r[1].noise_trace_precond));
  EXPECT_TRUE(std::isfinite(r[32].noise_trace_precond));
  EXPECT_NE(r[32].noise_trace_precond, r[32].noise_trace);
  EXPECT_TRUE(std::isnan(r[33].noise_trace_precond));
  EXPECT_EQ(s.noise.steps, 30);          // the recent half of 60
  EXPECT_EQ(s.noise_precond.steps, 15);  // every 4th: all 15, fewer than kNoiseMinSteps
  EXPECT_EQ(s.noise_measured_steps, 60);
}

TEST(TrainerNoiseScale, ABudgetSmallerThanOneMeasurementMeasuresFewerSteps) {
  // A budget of a billionth of the step time: whatever a step takes here (a loaded machine
  // has made it 150 ms), a measurement (microseconds at least) spends more credit than the
  // run's 400 steps earn, so after the first step, which always measures, none does. With a
  // budget of 1 every step measures, and spends a larger share of the time.
  Frozen f;
  TrainOptions o = frozen_steps(256, 4, 400);
  o.noise_scale_budget = 1e-9;
  MemorySink sink;
  const TrainSummary s = Trainer(*f.model, o, c10::Device("cpu")).fit(f.data, &sink);
  int64_t measured = 0;
  for (const StepRecord& r : sink.records())
    if (std::isfinite(r.noise_grad_sqr)) ++measured;
  std::cout << "measured " << measured << " of 400 steps, " << 100 * s.noise_cost_share
            << "% of the step time\n";
  EXPECT_EQ(measured, 1);
  EXPECT_EQ(s.noise_measured_steps, 1);
  EXPECT_TRUE(std::isfinite(sink.records().front().noise_grad_sqr)) << "the first step";
  EXPECT_EQ(sink.records().front().gns_b_small, 64);
  EXPECT_EQ(sink.records().front().gns_b_big, 256);
  EXPECT_GT(s.noise_cost_share, 0);
  o.noise_scale_budget = 1;
  const TrainSummary every = Trainer(*f.model, o, c10::Device("cpu")).fit(f.data);
  EXPECT_EQ(every.noise_measured_steps, 400);
  EXPECT_GT(every.noise_cost_share, s.noise_cost_share);
}

TEST(TrainerNoiseScale, ABudgetMustBeAShareAboveZero) {
  TrainOptions o = frozen_steps(64, 2, 10);
  for (double bad : {0.0, -0.5, std::nan("")}) {
    o.noise_scale_budget = bad;
    EXPECT_THROW(o.validate(), Error) << bad;
  }
}

}  // namespace
}  // namespace saturate
