// SPDX-License-Identifier: Apache-2.0
// Issue 13: the quality guard with a real model on real data (Fashion-MNIST, an MLP, the
// LibTorch trial runner and the pipeline `train` builds), judging on a held-out validation
// split. It must reject a harmful change (a linearly rescaled SGD learning rate that diverges)
// and accept a harmless one (AdamW's square-root rule); neither outcome is enforced by the
// code under test, only by what the runs measure.
#include <gtest/gtest.h>

#include "saturate/data/training_input.h"
#include "saturate/device/device_memory.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/tune/torch_trial_runner.h"
#include "saturate/tune/tuner.h"

namespace saturate {
namespace {

struct Fixture {
  TrainingInput input;
  std::unique_ptr<DeviceMemory> memory;
  std::unique_ptr<TorchTrialRunner> runner;
};

Fixture open_fmnist() {
  InputOptions in;
  in.data_spec = "fashion-mnist";
  in.val_fraction = 0.05;
  Fixture f;
  f.input = open_training_input(in, /*cuda_device=*/-1);
  f.memory = make_device_memory(c10::Device("cpu"), int64_t{512} << 20);
  f.runner = std::make_unique<TorchTrialRunner>("mlp", f.input, c10::Device("cpu"), *f.memory,
                                                /*max_batch=*/512);
  return f;
}

// The batch search pinned to `batch` (min = max), so what the guard judges does not depend on
// which batch this machine happened to measure fastest.
TuneOptions guard_only(int64_t samples, int64_t batch) {
  TuneOptions o;
  o.effective_batch = EffectiveBatch::kRescale;
  o.quality_samples = samples;
  o.search.min_batch = batch;
  o.search.max_batch = batch;
  o.measure_steps = 3;
  return o;
}

}  // namespace

TEST(QualityGuardReal, Issue13_RejectsALinearlyRescaledSgdRateThatDiverges) {
  Fixture f = open_fmnist();
  ASSERT_EQ(f.input.splits.validation.size(), 3000);
  RunConfig base;
  base.train.batch_size = 8;
  base.train.optimizer = OptimizerKind::kSgd;
  base.train.lr = 0.01;  // learns at batch 8; 64x that at batch 512 does not
  base.train.momentum = 0.9;
  const Plan plan = tune(*f.runner, base, guard_only(8192, /*batch=*/512));
  ASSERT_GT(plan.trials.size(), 0u);
  EXPECT_EQ(plan.quality.metric, "val_accuracy");
  // The rescaled candidate is rejected; the next candidate is the user's batch and rate.
  EXPECT_NE(plan.quality.why.find("rejected"), std::string::npos) << plan.quality.why;
  EXPECT_EQ(plan.config.train.batch_size, 8) << plan.quality.why;
  EXPECT_DOUBLE_EQ(plan.config.train.lr, 0.01);
  EXPECT_GT(plan.quality.baseline, 0.6) << "the baseline learned something";
  EXPECT_NE(plan.effective_batch, EffectiveBatchOutcome::kLrRescaled);
  EXPECT_GE(plan.quality.metric_noise, 0.0);
}

TEST(QualityGuardReal, Issue13_AcceptsAHarmlessSquareRootRescaleForAdamW) {
  Fixture f = open_fmnist();
  RunConfig base;
  base.train.batch_size = 8;
  base.threads = 1;
  base.train.optimizer = OptimizerKind::kAdamW;
  base.train.lr = 1e-3;
  // Twice the batch at √2 the rate, judged on the same 16384 samples: a harmless change. (At
  // 64x the batch, 16 steps instead of 1024 do lose 10 points, and the guard says so.) The
  // tuner only takes a batch that measured faster beyond noise: at batch 8 an MLP step is
  // mostly fixed per-step cost, so batch 16 is far faster and the guard does get to judge it.
  // Steps of a few milliseconds on a shared machine: 20 of them make "faster beyond noise"
  // a measurement rather than a coin toss.
  TuneOptions o = guard_only(16384, /*batch=*/16);
  o.measure_steps = 20;
  const Plan plan = tune(*f.runner, base, o);
  std::string stages;
  for (const PlanStage& s : plan.stages) stages += "\n" + s.name + ": " + s.why;
  ASSERT_EQ(plan.config.train.batch_size, 16) << plan.quality.why << stages;
  EXPECT_EQ(plan.quality.status, QualityStatus::kAccepted) << plan.quality.why;
  EXPECT_TRUE(plan.quality.accepted);
  EXPECT_GT(plan.quality.baseline, 0.6) << "the baseline learned something";
  EXPECT_GE(plan.quality.tuned, plan.quality.baseline - plan.quality.tolerance);
}

// The real runner's training, with the throughput a GPU would show (a fixed 4 ms per step and
// 5 µs per sample, so samples/s rises ×3.8 from batch 16 to 64 and ×12 to 256) and a probe that reports a
// large gradient noise scale (4000), as a large model's would: goodput then takes the
// throughput-best batch. Whether a batch's gain-scaled learning rate trains or diverges is what
// the real runs say.
class GpuLikeThroughput : public TrialRunner {
 public:
  explicit GpuLikeThroughput(TrialRunner& inner) : inner_(inner) {}
  TrialOutcome run(const TrialRequest& r) override {
    TrialOutcome t = inner_.run(r);
    if (!t.fits) return t;
    const auto b = static_cast<double>(r.config.train.batch_size);
    Measurement& m = t.measurement;
    m.samples_per_s = b / (4e-3 + 5e-6 * b);
    for (double& v : m.step_samples_per_s) v = m.samples_per_s;
    m.spread = 0;
    if (r.config.train.accumulate > 1) {
      m.noise.phi = 4000;
      m.noise.low = 3000;
      m.noise.high = 5500;
      m.noise.steps = std::max<int64_t>(m.noise.steps, 50);
    }
    return t;
  }
  QualityRun train_and_validate(const RunConfig& c, int64_t samples) override {
    return inner_.train_and_validate(c, samples);
  }
  bool measures_noise_scale() const override { return true; }
  int64_t memory_limit_bytes() const override { return inner_.memory_limit_bytes(); }
  int64_t max_batch_size() const override { return inner_.max_batch_size(); }

 private:
  TrialRunner& inner_;
};

TEST(QualityGuardReal, Issue35_WhenTheThroughputBestBatchDivergesTheGuardTakesASmallerOne) {
  Fixture f = open_fmnist();
  GpuLikeThroughput runner(*f.runner);
  RunConfig base;
  base.train.batch_size = 16;
  base.threads = 1;
  base.train.optimizer = OptimizerKind::kSgd;
  // Momentum 0.9; φ is large here, so the gain rule multiplies the LR by about B/16: ≈ 0.59 at
  // batch 256 and 0.29 at 128, which blow up on this MLP, and ≈ 0.15 at 64, which trains (in
  // `train`, batch 64 trains at 0.12 and 0.15 with every seed tried but at 0.2 with some seeds
  // only, on an Intel Xeon; 0.05 here once made 64's LR that borderline 0.2).
  base.train.lr = 0.0375;
  TuneOptions o;
  o.effective_batch = EffectiveBatch::kAuto;
  o.quality_samples = 8192;
  o.search.max_batch = 256;
  o.measure_steps = 3;
  const Plan plan = tune(runner, base, o);
  std::string stages;
  for (const PlanStage& s : plan.stages) stages += "\n" + s.name + ": " + s.why;
  ASSERT_TRUE(plan.goodput.usable) << plan.goodput.why << stages;
  ASSERT_GE(plan.goodput.branches.size(), 2u) << plan.quality.why << stages;
  const GoodputBranch& first = plan.goodput.branches.front();
  EXPECT_EQ(first.batch, 256) << plan.quality.why;
  EXPECT_TRUE(first.diverged) << plan.quality.why;
  EXPECT_NE(plan.quality.why.find("it diverged or made no progress"), std::string::npos)
      << plan.quality.why;
  EXPECT_FALSE(first.accepted);
  ASSERT_EQ(plan.quality.status, QualityStatus::kAccepted) << plan.quality.why;
  // Not the user's batch: a smaller batch on the curve that passed.
  EXPECT_GT(plan.config.train.batch_size, 16) << plan.quality.why;
  EXPECT_LT(plan.config.train.batch_size, 256) << plan.quality.why;
  EXPECT_TRUE(plan.goodput.branches.back().accepted);
  EXPECT_EQ(plan.goodput.branches.back().batch, plan.config.train.batch_size);
  EXPECT_GT(plan.config.train.lr, 0.05);
  EXPECT_GT(plan.quality.baseline, 0.6) << "the baseline learned something";
  EXPECT_GE(plan.quality.tuned, plan.quality.baseline - plan.quality.tolerance);
}

// Issue 34 (defect 4): the user's --eval-every ran inside tune's trials and guard runs, at a
// cost the budget never sized. A trial evaluates nothing; a guard run only at its end.
TEST(TorchTrialRunnerReal, Issue34_EvalEveryStaysOutOfTrialsAndGuardRuns) {
  Fixture f = open_fmnist();
  struct Evals : TelemetrySink {
    void on_step(const StepRecord&) override { ++steps; }
    void on_eval(int64_t step, const std::string&, double) override { at.push_back(step); }
    int64_t steps = 0;
    std::vector<int64_t> at;
  } seen;
  f.runner->set_observer(&seen);
  RunConfig c;
  c.train.batch_size = 64;
  c.train.eval_every = 2;
  TrialRequest req;
  req.config = c;
  req.steps = 6;
  ASSERT_TRUE(f.runner->run(req).fits);
  EXPECT_EQ(seen.steps, 6);
  EXPECT_TRUE(seen.at.empty()) << "a trial evaluated at step " << seen.at.front();
  const QualityRun q = f.runner->train_and_validate(c, /*samples=*/6 * 64);
  EXPECT_EQ(seen.steps, 12);
  ASSERT_FALSE(seen.at.empty()) << "the guard run's final validation";
  for (int64_t step : seen.at) EXPECT_EQ(step, 6) << "a guard run evaluated along the way";
}

TEST(TorchTrialRunnerReal, Issue13_EvaluationMeasuresUnderInferenceModeWithTheTrainingStateResident) {
  Fixture f = open_fmnist();
  RunConfig c;
  c.train.batch_size = 512;
  c.train.optimizer = OptimizerKind::kAdamW;
  const EvalTrial e = f.runner->evaluate(c, /*eval_batch=*/512, /*batches=*/2);
  ASSERT_TRUE(e.measured);
  ASSERT_TRUE(e.fits);
  EXPECT_EQ(e.samples, 1024);
  EXPECT_GT(e.samples_per_s, 0);
  TrialRequest req;
  req.config = c;
  req.steps = 2;
  const TrialOutcome t = f.runner->run(req);
  ASSERT_TRUE(t.fits);
  // Weights, gradients and AdamW's moments are resident in both; a training step also keeps
  // the activations for backward, evaluation does not.
  EXPECT_GT(e.peak_memory_bytes, 0);
  EXPECT_LT(e.peak_memory_bytes, t.measurement.peak_memory_bytes);
  // The whole split at most, however large the batch asked for.
  const EvalTrial all = f.runner->evaluate(c, /*eval_batch=*/100000, /*batches=*/2);
  ASSERT_TRUE(all.fits);
  EXPECT_EQ(all.samples, f.input.splits.validation.size());
}

}  // namespace saturate
