// SPDX-License-Identifier: Apache-2.0
// The staged tuner on SimulatedDevice profiles: each stage's decision, the effective-batch
// policy, the quality guard's fall-back and the budget.
#include "saturate/tune/tuner.h"

#include <cmath>

#include <gtest/gtest.h>

#include "saturate/core/error.h"
#include "saturate/tune/simulated_device.h"

namespace saturate {
namespace {

SimulatedProfile gpu_like() {
  SimulatedProfile p;
  p.limit_bytes = 16LL << 30;
  p.fixed_bytes = 2LL << 30;
  p.per_sample_bytes = 16LL << 20;  // ≈ 780 samples under the reserve at fp32
  p.half_batch = 32;
  p.step_noise = 0.01;
  p.bf16_speedup = 1.6;
  p.bf16_memory = 0.6;
  p.best_lr_per_sample = 3e-3 / 64;
  return p;
}

}  // namespace

// Compute 20000 samples/s at large batches; decoding a sample takes one core 500 µs (2000/s).
SimulatedProfile gpu_like_profile_for_input() {
  SimulatedProfile p;
  p.limit_bytes = 16LL << 30;
  p.fixed_bytes = 2LL << 30;
  p.per_sample_bytes = 64LL << 20;
  p.peak_samples_per_s = 20000;
  p.half_batch = 4;
  p.step_noise = 0.01;
  p.data_us_per_sample = 500;
  p.cores = 16;
  return p;
}

namespace {

TrialConfig user(int64_t batch, OptimizerKind opt = OptimizerKind::kAdamW) {
  TrialConfig c;
  c.train.batch_size = batch;
  c.train.lr = 3e-3 * (opt == OptimizerKind::kSgd ? 1.0 : 1.0);
  c.train.optimizer = opt;
  return c;
}

TuneOptions options() {
  TuneOptions o;
  o.precisions = {Precision::kBf16};
  o.quality_samples = 10000;
  return o;
}

const PlanStage& stage(const Plan& p, const std::string& name) {
  for (const PlanStage& s : p.stages)
    if (s.name == name) return s;
  ADD_FAILURE() << "no stage " << name;
  static PlanStage none;
  return none;
}

}  // namespace

TEST(Tuner, Issue5_TakesFasterPrecisionAndBatchAndRescalesTheLearningRate) {
  SimulatedDevice dev(gpu_like(), 1);
  std::vector<std::string> heard;
  const Plan p = tune(dev, user(64), options(), [&](const PlanStage& s) { heard.push_back(s.name); });
  EXPECT_EQ(heard, (std::vector<std::string>{"baseline", "precision", "batch_size",
                                              "memory_savers", "quality_guard"}));
  EXPECT_EQ(p.config.train.precision, Precision::kBf16);
  EXPECT_TRUE(stage(p, "precision").changed);
  EXPECT_GT(p.config.train.batch_size, 64);
  EXPECT_EQ(p.effective_batch, "lr_rescaled");
  // Square-root rule for AdamW.
  const double k = static_cast<double>(p.config.train.batch_size) / 64.0;
  EXPECT_NEAR(p.config.train.lr, 3e-3 * std::sqrt(k), 1e-12);
  EXPECT_NE(p.effective_batch_why.find("square-root"), std::string::npos);
  EXPECT_GT(p.tuned.samples_per_s, 1.5 * p.baseline.samples_per_s);
  EXPECT_TRUE(p.quality.accepted) << p.quality.why;
  EXPECT_LE(p.tuned.peak_memory_bytes, p.memory_limit_bytes);
  EXPECT_GT(p.probe_steps, 0);
  for (const PlanTrial& t : p.trials) EXPECT_FALSE(t.stage.empty());
}

TEST(Tuner, SgdGetsTheLinearRule) {
  EXPECT_DOUBLE_EQ(rescaled_lr(0.1, OptimizerKind::kSgd, 64, 256), 0.4);
  EXPECT_DOUBLE_EQ(rescaled_lr(1e-3, OptimizerKind::kAdamW, 64, 256), 2e-3);
  EXPECT_DOUBLE_EQ(rescaled_lr(0.1, OptimizerKind::kSgd, 256, 64), 0.025);
}

TEST(Tuner, KeepsFp32WhenReducedPrecisionIsSlower) {
  SimulatedProfile p = gpu_like();
  p.bf16_speedup = 0.8;  // a CPU without native bf16
  SimulatedDevice dev(p, 2);
  const Plan plan = tune(dev, user(64), options());
  EXPECT_EQ(plan.config.train.precision, Precision::kFp32);
  EXPECT_FALSE(stage(plan, "precision").changed);
  EXPECT_NE(stage(plan, "precision").why.find("kept fp32"), std::string::npos);
}

TEST(Tuner, Issue5_QualityGuardRejectsAChangeThatHurtsAccuracyAndFallsBack) {
  SimulatedProfile p = gpu_like();
  p.reduced_precision_penalty = 0.05;  // bf16 costs this model 5 points of accuracy
  SimulatedDevice dev(p, 3);
  const Plan plan = tune(dev, user(64, OptimizerKind::kSgd), options());
  EXPECT_EQ(plan.config.train.precision, Precision::kFp32) << plan.quality.why;
  EXPECT_TRUE(plan.quality.accepted);
  EXPECT_NE(plan.quality.why.find("rejected"), std::string::npos) << plan.quality.why;
  EXPECT_TRUE(stage(plan, "quality_guard").changed);
  EXPECT_GE(plan.quality.tuned, plan.quality.baseline - plan.quality.tolerance);
}

TEST(Tuner, AnAdamWBatchTooFarFromTheUsersIsRejectedByQuality) {
  // Memory for thousands of samples: AdamW's √ rule drifts lr/sample by half an octave per
  // doubling; past the model's tolerance the quality guard steps back to the user's batch.
  SimulatedProfile p = gpu_like();
  p.per_sample_bytes = 1LL << 20;  // ≈ 12000 samples fit
  p.half_batch = 1000;
  p.bf16_speedup = 1.0;
  p.best_lr_per_sample = 3e-3 / 8;  // the user's batch and lr are at the sweet spot
  SimulatedDevice dev(p, 4);
  const Plan plan = tune(dev, user(8), options());
  EXPECT_TRUE(plan.quality.accepted);
  EXPECT_NE(plan.quality.why.find("rejected"), std::string::npos) << plan.quality.why;
  EXPECT_EQ(plan.config.train.batch_size, 8);
  EXPECT_DOUBLE_EQ(plan.config.train.lr, 3e-3);
}

TEST(Tuner, Issue5_WhenTheUsersBatchDoesNotFitItIsKeptThroughAccumulation) {
  SimulatedProfile p = gpu_like();
  p.bf16_speedup = 1.0;
  p.half_batch = 4;
  SimulatedDevice dev(p, 5);
  TuneOptions o = options();
  o.precisions.clear();
  const Plan plan = tune(dev, user(4096), o);
  EXPECT_EQ(plan.baseline.samples_per_s, 0.0) << "the user's batch runs out of memory";
  EXPECT_NE(stage(plan, "baseline").why.find("memory binds"), std::string::npos);
  EXPECT_EQ(plan.config.train.batch_size, 4096);
  EXPECT_GT(plan.config.train.accumulate, 1);
  EXPECT_EQ(plan.effective_batch, "kept");
  EXPECT_DOUBLE_EQ(plan.config.train.lr, 3e-3);
  // The memory-saver stage compared checkpointing against accumulation and said which won.
  const PlanStage& savers = stage(plan, "memory_savers");
  EXPECT_NE(savers.why.find("checkpoint segments"), std::string::npos) << savers.why;
  EXPECT_LE(p.worst_peak_bytes(plan.config), p.limit_bytes);
}

TEST(Tuner, KeepPolicyNeverChangesTheEffectiveBatch) {
  SimulatedDevice dev(gpu_like(), 6);
  TuneOptions o = options();
  o.effective_batch = EffectiveBatch::kKeep;
  const Plan plan = tune(dev, user(64), o);
  EXPECT_EQ(plan.config.train.batch_size * 1, 64);
  EXPECT_EQ(plan.effective_batch, "kept");
  EXPECT_DOUBLE_EQ(plan.config.train.lr, 3e-3);
}

TEST(Tuner, ThreadsStageKeepsTheFasterCount) {
  SimulatedDevice dev(gpu_like(), 7);
  TuneOptions o = options();
  o.threads = {4, 2};
  TrialConfig base = user(64);
  base.threads = 4;
  const Plan plan = tune(dev, base, o);
  // The simulator's speed does not depend on threads: nothing beats the current count.
  EXPECT_EQ(plan.config.threads, 4);
  EXPECT_FALSE(stage(plan, "threads").changed);
}

TEST(Tuner, ASpentBudgetSkipsOptionalStagesAndSaysSo) {
  SimulatedDevice dev(gpu_like(), 8);
  TuneOptions o = options();
  o.budget_s = 1e-9;
  const Plan plan = tune(dev, user(64), o);
  EXPECT_NE(stage(plan, "precision").why.find("--budget-s"), std::string::npos);
  EXPECT_EQ(plan.config.train.precision, Precision::kFp32);
  EXPECT_GT(plan.config.train.batch_size, 0);  // the batch-size stage always runs
}

TEST(Tuner, WithoutQualitySamplesTheGuardSaysItDidNotRun) {
  SimulatedDevice dev(gpu_like(), 9);
  TuneOptions o = options();
  o.quality_samples = 0;
  const Plan plan = tune(dev, user(64), o);
  EXPECT_FALSE(plan.quality.accepted);
  EXPECT_NE(plan.quality.why.find("not run"), std::string::npos);
}

TEST(EffectiveBatch, ParsesAndRejects) {
  EXPECT_EQ(parse_effective_batch("keep"), EffectiveBatch::kKeep);
  EXPECT_EQ(parse_effective_batch("rescale"), EffectiveBatch::kRescale);
  EXPECT_EQ(parse_effective_batch("auto"), EffectiveBatch::kAuto);
  EXPECT_THROW(parse_effective_batch("kept"), Error);
}

}  // namespace saturate

namespace saturate {

TEST(Tuner, Issue6_SlowInputGetsWorkersUntilDataWaitIsHidden) {
  SimulatedProfile p = gpu_like_profile_for_input();
  SimulatedDevice dev(p, 10);
  TuneOptions o;
  o.max_workers = 16;
  o.quality_samples = 0;
  const Plan plan = tune(dev, TrialConfig{}, o);
  EXPECT_GE(plan.config.workers, 2);
  bool found = false;
  for (const PlanStage& s : plan.stages) {
    if (s.name != "input_pipeline") continue;
    found = true;
    EXPECT_TRUE(s.changed) << s.why;
    EXPECT_GT(s.after_samples_per_s, 1.5 * s.before_samples_per_s) << s.why;
  }
  EXPECT_TRUE(found);
}

TEST(Tuner, FastInputLeavesThePipelineAlone) {
  SimulatedProfile p = gpu_like_profile_for_input();
  p.data_us_per_sample = 0;
  SimulatedDevice dev(p, 11);
  TuneOptions o;
  o.max_workers = 16;
  o.quality_samples = 0;
  const Plan plan = tune(dev, TrialConfig{}, o);
  EXPECT_EQ(plan.config.workers, 0);
}

}  // namespace saturate
