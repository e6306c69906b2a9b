// SPDX-License-Identifier: Apache-2.0
// The ranks stage against a scripted JobRunner: what it keeps, and (issue 34, defects 2 and 5)
// that a failed or interrupted candidate is an outcome, not an error, and that a candidate
// whose processes together need more memory than the tune planned for is not taken.
#include "saturate/tune/ranks_stage.h"

#include <functional>
#include <map>

#include <gtest/gtest.h>

#include "saturate/tune/noise_rule.h"

namespace saturate {
namespace {

// Answers each run from a script keyed by the candidate's world size; counts the runs.
class ScriptedJobs : public JobRunner {
 public:
  using Script = std::function<JobOutcome(int ranks, int run_of_this_size)>;
  explicit ScriptedJobs(Script script) : script_(std::move(script)) {}
  JobOutcome run(const JobRequest& r) override {
    requests.push_back(r);
    if (r.validate && validate) return validate(r);
    return script_(r.config.world_size, runs_[r.config.world_size]++);
  }
  std::vector<JobRequest> requests;
  std::function<JobOutcome(const JobRequest&)> validate;  ///< quality runs, when set

 private:
  Script script_;
  std::map<int, int> runs_;
};

JobOutcome ok(double sps, int64_t peak = 100 << 20) {
  JobOutcome o;
  o.job_samples_per_s = sps;
  o.peak_memory_bytes = peak;
  o.wall_s = 2.0;
  return o;
}

Plan tuned_plan(int64_t batch = 256) {
  Plan p;
  p.config.train.batch_size = batch;
  p.config.threads = 4;
  p.tuned.samples_per_s = 4000;
  p.effective_batch = EffectiveBatchOutcome::kLrRescaled;
  return p;
}

RanksStageOptions four_cores() {
  RanksStageOptions o;
  o.cores = 4;
  o.max_ranks = 4;
  o.memory_limit_bytes = int64_t{8} << 30;
  return o;
}

}  // namespace

TEST(NoiseRule, AGainCountsOnlyWhenLargeEnoughAndBeyondNoise) {
  EXPECT_TRUE(beats(110, 0.01, 100, 0.01, 0.03));
  EXPECT_FALSE(beats(102, 0.001, 100, 0.001, 0.03)) << "below the minimum gain";
  EXPECT_FALSE(beats(110, 0.05, 100, 0.05, 0.03)) << "10% is within twice the noise (14%)";
  EXPECT_TRUE(beats(1, 0.5, 0, 0, 0.03)) << "anything beats what could not run";
  EXPECT_FALSE(beats(0, 0, 100, 0, 0.03));
}

TEST(RanksStage, KeepsMoreProcessesWhenClearlyFasterAndSplitsTheGlobalBatch) {
  ScriptedJobs jobs([](int ranks, int) { return ok(ranks == 1 ? 3000 : ranks == 2 ? 4200 : 3900); });
  Plan plan = tuned_plan();
  tune_ranks(plan, four_cores(), jobs);
  ASSERT_EQ(plan.stages.size(), 1u);
  EXPECT_TRUE(plan.stages[0].changed) << plan.stages[0].why;
  EXPECT_EQ(plan.config.world_size, 2);
  EXPECT_EQ(plan.config.train.batch_size, 128);
  EXPECT_EQ(plan.config.threads, 2);
  EXPECT_EQ(jobs.requests.size(), 6u) << "three candidates, two rounds";
  EXPECT_EQ(plan.trials.size(), 6u);
  EXPECT_FALSE(plan.interrupted);
}

TEST(RanksStage, Issue34_AFailingCandidateIsAMeasuredFailureAndTheTuneGoesOn) {
  ScriptedJobs jobs([](int ranks, int) {
    if (ranks == 1) return ok(3000);
    JobOutcome o;
    o.status = JobStatus::kFailed;
    o.reason = "rank 1 exited with code 1: out of memory";
    return o;
  });
  Plan plan = tuned_plan();
  ASSERT_NO_THROW(tune_ranks(plan, four_cores(), jobs));
  EXPECT_FALSE(plan.stages[0].changed);
  EXPECT_EQ(plan.config.world_size, 1);
  EXPECT_NE(plan.stages[0].why.find("2 ranks × 2 threads failed (rank 1 exited with code 1: out "
                                    "of memory)"), std::string::npos)
      << plan.stages[0].why;
  // A failed candidate is not run again in the second round.
  int failed_runs = 0;
  for (const JobRequest& r : jobs.requests) failed_runs += r.config.world_size > 1;
  EXPECT_EQ(failed_runs, 2) << "2 and 4 ranks once each";
  EXPECT_FALSE(plan.interrupted);
}

TEST(RanksStage, Issue34_CtrlCDuringACandidateEndsTheStageAndMarksThePlanInterrupted) {
  ScriptedJobs jobs([](int ranks, int) {
    if (ranks == 1) return ok(3000);
    JobOutcome o;
    o.status = JobStatus::kInterrupted;  // the launcher passed Ctrl-C to the ranks
    return o;
  });
  Plan plan = tuned_plan();
  tune_ranks(plan, four_cores(), jobs);
  EXPECT_TRUE(plan.interrupted);
  EXPECT_FALSE(plan.stages[0].changed);
  EXPECT_EQ(plan.config.world_size, 1);
  EXPECT_EQ(jobs.requests.size(), 2u) << "nothing runs after the interrupted job";
  EXPECT_NE(plan.stages[0].why.find("interrupted"), std::string::npos) << plan.stages[0].why;
  // The stop flag, set before a run, does the same.
  std::atomic<bool> stop{true};
  RanksStageOptions o = four_cores();
  o.stop = &stop;
  Plan again = tuned_plan();
  ScriptedJobs none([](int, int) { return ok(1); });
  tune_ranks(again, o, none);
  EXPECT_TRUE(again.interrupted);
  EXPECT_TRUE(none.requests.empty());
}

TEST(RanksStage, Issue34_ACandidateOverTheMemoryLimitIsNotTakenHoweverFast) {
  // Each process peaks at 3 GiB: one fits the 8 GiB limit less 10%, two (6 GiB) fit, four
  // (12 GiB) do not, however fast they run.
  ScriptedJobs jobs([](int ranks, int) {
    return ok(ranks == 1 ? 3000 : ranks == 2 ? 3300 : 6000, int64_t{3} << 30);
  });
  Plan plan = tuned_plan();
  tune_ranks(plan, four_cores(), jobs);
  EXPECT_EQ(plan.config.world_size, 2) << plan.stages[0].why;
  EXPECT_NE(plan.stages[0].why.find("over the memory limit"), std::string::npos)
      << plan.stages[0].why;
}

TEST(RanksStage, AGainWithinTheRunsNoiseKeepsOneProcess) {
  // Two ranks measure 6% faster on average, but their two runs are 30% apart.
  ScriptedJobs jobs([](int ranks, int run) {
    if (ranks == 1) return ok(3000);
    return ok(ranks == 2 ? (run == 0 ? 2700 : 3660) : 2000);
  });
  Plan plan = tuned_plan();
  tune_ranks(plan, four_cores(), jobs);
  EXPECT_FALSE(plan.stages[0].changed) << plan.stages[0].why;
  EXPECT_EQ(plan.config.world_size, 1);
}

TEST(RanksStage, StopsAtTheBudgetWithWhatItMeasured) {
  // The runs take far longer than guessed: after the first, the next would not fit the budget.
  ScriptedJobs jobs([](int ranks, int) {
    JobOutcome o = ok(ranks == 1 ? 3000 : 5000);
    o.wall_s = 25;
    return o;
  });
  RanksStageOptions o = four_cores();
  o.budget_left_s = 30;
  Plan plan = tuned_plan();
  tune_ranks(plan, o, jobs);
  EXPECT_EQ(jobs.requests.size(), 1u);
  EXPECT_NE(plan.stages[0].why.find("stopped at the budget"), std::string::npos)
      << plan.stages[0].why;
  EXPECT_FALSE(plan.stages[0].changed);
}

TEST(RanksStage, SaysWhyItDoesNotRun) {
  ScriptedJobs jobs([](int, int) { return ok(1); });
  RanksStageOptions o = four_cores();
  o.model_has_buffers = true;
  Plan plan = tuned_plan();
  tune_ranks(plan, o, jobs);
  EXPECT_NE(plan.stages[0].why.find("BatchNorm"), std::string::npos);
  o = four_cores();
  o.cores = 1;
  Plan single = tuned_plan();
  tune_ranks(single, o, jobs);
  EXPECT_NE(single.stages[0].why.find("one usable core"), std::string::npos);
  o = four_cores();
  o.budget_left_s = 1;
  Plan poor = tuned_plan();
  tune_ranks(poor, o, jobs);
  EXPECT_NE(poor.stages[0].why.find("budget left"), std::string::npos);
  EXPECT_TRUE(jobs.requests.empty());
}

}  // namespace saturate

namespace saturate {

// Issue 19: the user's batch fits one process only by accumulation, and that job runs out of
// memory; the model's chain can be split, so its batch also runs as pipeline stages, each with
// its own memory (40 MiB a stage: 80 MiB for both, over the 54 MiB a data-parallel pair would be
// held to), and the stages that ran are taken.
TEST(RanksStage, Issue19_WhenOneProcessRunsOutOfMemoryThePipelineStagesThatRunAreTaken) {
  auto script = [](int ranks, int) {
    if (ranks > 1) {
      JobOutcome o = ok(ranks == 2 ? 2500 : 2000, int64_t{40} << 20);
      o.pipeline_split = ranks == 2 ? "1,2" : "";
      return o;
    }
    JobOutcome o;
    o.status = JobStatus::kFailed;
    o.reason = "rank 0 exited with code 1: CPU out of memory";
    return o;
  };
  ScriptedJobs jobs(script);
  Plan plan = tuned_plan();
  plan.config.train.accumulate = 2;
  RanksStageOptions o = four_cores();
  o.memory_limit_bytes = int64_t{60} << 20;
  o.model_has_buffers = true;  // no data-parallel candidates: pipeline stages only
  o.pipeline_layers = 3;       // 4 stages would be more than the layers
  o.user_did_not_fit = true;
  tune_ranks(plan, o, jobs);
  ASSERT_EQ(plan.stages.size(), 1u);
  const PlanStage& st = plan.stages[0];
  EXPECT_TRUE(st.changed) << st.why;
  EXPECT_EQ(plan.config.pipeline_stages, 2);
  EXPECT_EQ(plan.config.world_size, 2);
  EXPECT_EQ(plan.config.train.batch_size, 256);
  EXPECT_EQ(plan.config.train.accumulate, 1);
  EXPECT_EQ(plan.config.micro_batches, 8);
  EXPECT_EQ(plan.config.global_batch(), 256);
  EXPECT_EQ(plan.tuned.samples_per_s, 2500);
  EXPECT_EQ(plan.tuned.peak_memory_bytes, int64_t{40} << 20) << "one stage's";
  EXPECT_NE(st.why.find("one process does not run within the memory limit: kept 2 pipeline "
                        "stages × 2 threads"),
            std::string::npos)
      << st.why;
  for (const JobRequest& r : jobs.requests) EXPECT_NE(r.config.world_size, 4) << "3 layers";
  // The stages are cut where the first run's balanced profile cut them, in the second run and
  // in the plan, so that train --config measures what the tune did.
  EXPECT_EQ(plan.config.pipeline_split, "1,2");
  int stage_runs = 0;
  for (const JobRequest& r : jobs.requests) {
    if (r.config.pipeline_stages != 2) continue;
    EXPECT_EQ(r.config.pipeline_split, stage_runs++ == 0 ? "balanced" : "1,2");
  }
  EXPECT_EQ(stage_runs, 2);
  // Without memory binding the plan, no stages are tried (and one process is kept).
  ScriptedJobs again([](int ranks, int) { return ok(ranks == 1 ? 3000 : 2500); });
  Plan fits = tuned_plan();
  o.user_did_not_fit = false;
  tune_ranks(fits, o, again);
  for (const JobRequest& r : again.requests) EXPECT_EQ(r.config.pipeline_stages, 1);
  EXPECT_EQ(fits.config.world_size, 1);
}

TEST(RanksStage, Issue19_WhenMemoryBindsASplitByTensorIsMeasuredAndTakenWhereItAloneRuns) {
  // The scripted runs: one process runs out of memory; split over 2 or 4 ranks, the model runs.
  auto script = [](int ranks, int) {
    JobOutcome o;
    o.status = JobStatus::kFailed;
    o.reason = "rank 0 exited with code 1: CPU out of memory";
    return ranks == 1 ? o : ok(1800, int64_t{30} << 20);
  };
  ScriptedJobs jobs([&](int ranks, int n) { return script(ranks, n); });
  Plan plan = tuned_plan();
  plan.config.train.accumulate = 4;
  plan.config.train.recompute_segments = 2;
  RanksStageOptions o = four_cores();
  o.memory_limit_bytes = int64_t{60} << 20;
  o.model_has_buffers = true;  // no data-parallel candidates
  o.user_did_not_fit = true;
  o.tensor_parallel_sizes = {2, 4};
  tune_ranks(plan, o, jobs);
  const PlanStage& st = plan.stages.at(0);
  ASSERT_TRUE(st.changed) << st.why;
  EXPECT_EQ(plan.config.tensor_parallel, 2) << "4 is as fast and no faster: the first kept";
  EXPECT_EQ(plan.config.pipeline_stages, 1);
  EXPECT_EQ(plan.config.world_size, 2);
  EXPECT_EQ(plan.config.replicas(), 1);
  EXPECT_EQ(plan.config.train.batch_size, 256) << "each rank takes the whole batch";
  EXPECT_EQ(plan.config.train.accumulate, 1);
  EXPECT_EQ(plan.config.train.recompute_segments, 0);
  EXPECT_EQ(plan.config.global_batch(), 256);
  EXPECT_EQ(plan.tuned.peak_memory_bytes, int64_t{30} << 20) << "one rank's";
  EXPECT_NE(st.why.find("kept 2 tensor-parallel ranks × 2 threads"), std::string::npos) << st.why;
  bool four = false;
  for (const JobRequest& r : jobs.requests) four = four || r.config.tensor_parallel == 4;
  EXPECT_TRUE(four) << "4 ranks are measured too";
  // fp16 is measured split (the shares agree on the loss scaler's skips), and so is gradient
  // clipping (the split clips by the whole norm); --adaptive-batch, which a split refuses, is not.
  ScriptedJobs half([&](int ranks, int n) { return script(ranks, n); });
  Plan with_fp16 = tuned_plan();
  with_fp16.config.train.accumulate = 4;
  with_fp16.config.train.precision = Precision::kFp16;
  tune_ranks(with_fp16, o, half);
  EXPECT_EQ(with_fp16.config.tensor_parallel, 2) << with_fp16.stages.back().why;
  ScriptedJobs adaptive([&](int ranks, int n) { return script(ranks, n); });
  Plan growing = tuned_plan();
  growing.config.train.accumulate = 4;
  growing.config.train.adaptive_batch = true;
  tune_ranks(growing, o, adaptive);
  for (const JobRequest& r : adaptive.requests) EXPECT_EQ(r.config.tensor_parallel, 1);
  EXPECT_EQ(growing.config.world_size, 1);
  ScriptedJobs clipped([&](int ranks, int n) { return script(ranks, n); });
  Plan with_clip = tuned_plan();
  with_clip.config.train.accumulate = 4;
  with_clip.config.train.clip_grad_norm = 1.0;
  tune_ranks(with_clip, o, clipped);
  EXPECT_EQ(with_clip.config.tensor_parallel, 2) << with_clip.stages.back().why;
  // Without memory binding the plan, none is measured.
  ScriptedJobs fits([](int ranks, int) { return ok(ranks == 1 ? 3000 : 2500); });
  Plan plain = tuned_plan();
  o.user_did_not_fit = false;
  tune_ranks(plain, o, fits);
  for (const JobRequest& r : fits.requests) EXPECT_EQ(r.config.tensor_parallel, 1);
}

// Issue 19: a GPT neither one process nor a split of one kind runs (2 shares or 2 stages each
// still hold too much) is measured as 2 stages of 2 shares on 4 cores, and that layout is kept;
// it takes the whole batch as one replica, without accumulation.
TEST(RanksStage, Issue19_StagesOfSharesAreMeasuredAndKeptWhereNeitherSplitAloneRuns) {
  ScriptedJobs jobs([](int ranks, int) {
    JobOutcome o;
    o.status = JobStatus::kFailed;
    o.reason = "rank 0 exited with code 1: CPU out of memory";
    return ranks == 4 ? ok(900, int64_t{25} << 20) : o;
  });
  Plan plan = tuned_plan();
  plan.config.train.accumulate = 4;
  RanksStageOptions o = four_cores();
  o.memory_limit_bytes = int64_t{60} << 20;
  o.model_has_buffers = true;  // no data-parallel candidates
  o.user_did_not_fit = true;
  o.pipeline_layers = 2;        // 4 stages alone would be more than the layers
  o.tensor_parallel_sizes = {2};
  tune_ranks(plan, o, jobs);
  const PlanStage& st = plan.stages.at(0);
  ASSERT_TRUE(st.changed) << st.why;
  EXPECT_EQ(plan.config.pipeline_stages, 2);
  EXPECT_EQ(plan.config.tensor_parallel, 2);
  EXPECT_EQ(plan.config.world_size, 4);
  EXPECT_EQ(plan.config.replicas(), 1);
  EXPECT_EQ(plan.config.train.batch_size, 256);
  EXPECT_EQ(plan.config.train.accumulate, 1);
  EXPECT_NE(st.why.find("kept 2 pipeline stages of 2 tensor-parallel ranks (4 processes) × 1 thread"),
            std::string::npos) << st.why;
  // With 2 cores and --max-ranks 2 the 4 processes are not tried; with --max-ranks 4 they are,
  // past the cores (a split that fits nowhere else), each on one thread.
  ScriptedJobs two([](int, int) { return ok(1000); });
  Plan small = tuned_plan();
  small.config.train.accumulate = 4;
  o.cores = 2;
  o.max_ranks = 2;
  tune_ranks(small, o, two);
  for (const JobRequest& r : two.requests) EXPECT_LE(r.config.world_size, 2);
  ScriptedJobs past([](int ranks, int) { return ok(ranks == 4 ? 900 : 1000); });
  Plan asked = tuned_plan();
  asked.config.train.accumulate = 4;
  o.max_ranks = 4;
  tune_ranks(asked, o, past);
  bool four = false;
  for (const JobRequest& r : past.requests) {
    four = four || (r.config.world_size == 4 && r.config.tensor_parallel == 2);
    if (r.config.tensor_parallel > 1 || r.config.pipeline_stages > 1) {
      EXPECT_EQ(r.config.threads, 1);
    }
  }
  EXPECT_TRUE(four) << "2 stages of 2 shares past 2 cores";
}

// A layout kept in place of one process must validate as one process does (the same samples
// and seed through train): else one process is kept, and the stage says why.
TEST(RanksStage, Issue19_ALayoutIsKeptOnlyWhenItsValidationMatchesOneProcesss) {
  auto validated = [](double loss, double accuracy) {
    JobOutcome o = ok(4000);
    o.val_loss = loss;
    o.val_accuracy = accuracy;
    return o;
  };
  struct Case {
    double loss, accuracy;
    bool kept;
    const char* says;
  };
  for (const Case& c : {Case{1.004, 0.80, true, "matches one process's val loss 1.0000"},
                        Case{1.100, 0.80, false, "is worse than one process's"},
                        Case{1.000, 0.75, false, "is worse than one process's"}}) {
    ScriptedJobs jobs([](int ranks, int) { return ok(ranks == 1 ? 3000 : ranks == 2 ? 4200 : 3900); });
    jobs.validate = [&](const JobRequest& r) {
      return r.config.world_size == 1 ? validated(1.0, 0.80) : validated(c.loss, c.accuracy);
    };
    Plan plan = tuned_plan();
    RanksStageOptions o = four_cores();
    o.quality_samples = 1000;
    tune_ranks(plan, o, jobs);
    const PlanStage& st = plan.stages.back();
    EXPECT_EQ(st.changed, c.kept) << st.why;
    EXPECT_EQ(plan.config.world_size, c.kept ? 2 : 1) << st.why;
    EXPECT_NE(st.why.find(c.says), std::string::npos) << st.why;
    if (!c.kept) {
      EXPECT_NE(st.why.find("kept one process: 2 ranks × 2 threads was fastest, but after 1024 "
                            "samples"), std::string::npos) << st.why;
    }
    // One quality run each, one process's first, of whole steps of the global batch.
    std::vector<JobRequest> quality;
    for (const JobRequest& r : jobs.requests)
      if (r.validate) quality.push_back(r);
    ASSERT_EQ(quality.size(), 2u);
    EXPECT_EQ(quality[0].config.world_size, 1);
    EXPECT_EQ(quality[1].config.world_size, 2);
    EXPECT_EQ(quality[0].steps, 4) << "1000 samples in steps of 256";
    int quality_trials = 0;
    for (const PlanTrial& t : plan.trials) quality_trials += t.purpose == "quality";
    EXPECT_EQ(quality_trials, 2);
  }
  // Not checked, and said so: no quality runs asked, or no one process to compare with.
  ScriptedJobs unasked([](int ranks, int) { return ok(ranks == 1 ? 3000 : 4200); });
  Plan plan = tuned_plan();
  tune_ranks(plan, four_cores(), unasked);
  EXPECT_EQ(plan.config.world_size, 2);
  EXPECT_NE(plan.stages.back().why.find("its validation was not checked: no quality runs"),
            std::string::npos) << plan.stages.back().why;
  ScriptedJobs one_fails([](int ranks, int) {
    if (ranks > 1) return ok(4200);
    JobOutcome o;
    o.status = JobStatus::kFailed;
    o.reason = "rank 0 ran out of memory";
    return o;
  });
  Plan memory_bound = tuned_plan();
  RanksStageOptions o = four_cores();
  o.quality_samples = 1000;
  tune_ranks(memory_bound, o, one_fails);
  EXPECT_EQ(memory_bound.config.world_size, 2);
  EXPECT_NE(memory_bound.stages.back().why.find("one process does not run to compare with"),
            std::string::npos) << memory_bound.stages.back().why;
  for (const JobRequest& r : one_fails.requests) EXPECT_FALSE(r.validate);
}

}  // namespace saturate
