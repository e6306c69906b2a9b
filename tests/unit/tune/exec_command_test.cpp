// SPDX-License-Identifier: Apache-2.0
// The exec protocol's §3 (mapping settings onto a program's flags and placeholders), the
// environment of a run, the reproduce line, and the measurement of step lines.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "saturate/core/error.h"
#include "saturate/tune/exec_command.h"
#include "saturate/tune/exec_trial_runner.h"

namespace saturate {
namespace {

using Argv = std::vector<std::string>;

ExecSettings bs(const std::string& value) { return {{"batch_size", value}}; }

TEST(ExecMap, ReplacesTheValueAfterTheFlagOrAfterEqualsOrAppends) {
  ExecCommand c;
  c.maps = {parse_exec_map("batch_size=--bs")};
  c.argv = {"python", "t.py", "--bs", "32", "--lr", "0.1"};
  EXPECT_EQ(exec_argv(c, bs("96")), (Argv{"python", "t.py", "--bs", "96", "--lr", "0.1"}));
  c.argv = {"python", "t.py", "--bs=32"};
  EXPECT_EQ(exec_argv(c, bs("96")), (Argv{"python", "t.py", "--bs=96"}));
  c.argv = {"python", "t.py"};
  EXPECT_EQ(exec_argv(c, bs("96")), (Argv{"python", "t.py", "--bs", "96"}));
  // A run that does not set the setting leaves the command as it is (rule 5).
  c.argv = {"python", "t.py", "--bs", "32"};
  EXPECT_EQ(exec_argv(c, {}), c.argv);
}

TEST(ExecMap, PlaceholdersAreFilledAndOtherBracesLeftAlone) {
  ExecCommand c;
  c.argv = {"run", "train.batch={batch_size}", "--cfg={\"a\": 1}", "{precision}{batch_size}"};
  const ExecSettings s = {{"batch_size", "64"}, {"precision", "bf16"}};
  EXPECT_EQ(exec_argv(c, s), (Argv{"run", "train.batch=64", "--cfg={\"a\": 1}", "bf1664"}));
  EXPECT_EQ(exec_placeholders(c), (std::set<std::string>{"batch_size", "precision"}));
}

TEST(ExecMap, UsageErrorsNameWhatIsWrong) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(dynamic_cast<const RunFailure*>(&e), nullptr);  // a usage error: exit 2
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([] { parse_exec_map("batch_sise=--bs"); }).find("did you mean 'batch_size'"),
            std::string::npos);
  EXPECT_NE(message([] { parse_exec_map("batch_size"); }).find("NAME=FLAG"), std::string::npos);
  ExecCommand c;
  EXPECT_NE(message([&] { check_exec_command(c, {}); }).find("no command after '--'"),
            std::string::npos);
  c.argv = {"python", "t.py", "--bs"};
  c.maps = {parse_exec_map("batch_size=--bs")};
  EXPECT_NE(message([&] { check_exec_command(c, {"batch_size"}); }).find("last word"),
            std::string::npos);
  c.maps.clear();
  c.argv = {"python", "t.py", "--pin={pin_memory}"};
  EXPECT_NE(message([&] { check_exec_command(c, {"batch_size"}); }).find("{pin_memory}"),
            std::string::npos);
  EXPECT_NO_THROW(check_exec_command(c, {"pin_memory"}));
}

TEST(ExecEnvironment, CarriesTheSettingsAndTheRunsFiles) {
  RunConfig config;
  config.train.batch_size = 96;
  config.train.accumulate = 3;
  config.workers = 2;
  ExecCommand c;
  c.argv = {"python", "t.py"};
  const ExecSettings s = exec_settings(config, 20, false);
  EXPECT_EQ(s.at("batch_size"), "32");  // the micro-batch
  EXPECT_EQ(s.at("grad_accum"), "3");
  EXPECT_EQ(s.count("pin_memory"), 0u);
  const auto env = exec_environment(c, s, "7", "/runs/run-7");
  auto value = [&](const std::string& name) {
    for (const auto& [n, v] : env)
      if (n == name) return v;
    return std::string("(absent)");
  };
  EXPECT_EQ(value("SATURATE_PROTOCOL"), "1");
  EXPECT_EQ(value("SATURATE_METRICS"), "/runs/run-7/metrics.jsonl");
  EXPECT_EQ(value("SATURATE_BATCH_SIZE"), "32");
  EXPECT_EQ(value("SATURATE_NUM_WORKERS"), "2");
  EXPECT_EQ(value("SATURATE_MAX_STEPS"), "20");
  EXPECT_EQ(value("TORCHELASTIC_ERROR_FILE"), "/runs/run-7/error.json");
  EXPECT_EQ(value("PYTHONPATH"), "(absent)");
  c.metrics_on_stdout = true;
  c.autohook_dir = "/hook";
  const auto env2 = exec_environment(c, s, "7", "/runs/run-7");
  bool has_metrics = false, hook_first = false;
  for (const auto& [n, v] : env2) {
    has_metrics = has_metrics || n == "SATURATE_METRICS";
    hook_first = hook_first || (n == "PYTHONPATH" && v.rfind("/hook", 0) == 0);
  }
  EXPECT_FALSE(has_metrics);
  EXPECT_TRUE(hook_first);
}

TEST(ExecEnvironment, ReproduceLineQuotesAndDropsTheStepLimit) {
  ExecCommand c;
  c.argv = {"python", "my train.py", "--name=it's"};
  const ExecSettings s = {{"batch_size", "64"}, {"max_steps", "20"}};
  EXPECT_EQ(exec_reproduce_line(c, s),
            "SATURATE_PROTOCOL=1 SATURATE_METRICS=/dev/null SATURATE_BATCH_SIZE=64 python "
            "'my train.py' '--name=it'\\''s'");
}

ExecStep step(double t, int64_t samples, double wait = -1, double loss = NAN) {
  ExecStep s;
  s.t = t;
  s.samples = samples;
  s.data_wait_s = wait;
  s.loss = loss;
  return s;
}

TEST(ExecMeasure, TimesTheStepsAfterTheWarmUp) {
  // Step 1 is slow (warm-up); steps 2-5 take 0.1 s for 10 samples each, 0.02 s of it waiting.
  const std::vector<ExecStep> steps = {step(100.0, 10), step(100.1, 10, 0.02, 2.0),
                                       step(100.2, 10, 0.02, 1.0), step(100.3, 10, 0.02),
                                       step(100.4, 10, 0.02)};
  const Measurement m = measure_exec_steps(steps, 1, 1);
  EXPECT_NEAR(m.samples_per_s, 100, 1e-6);
  EXPECT_NEAR(m.phases.step_ms, 100, 1e-6);
  EXPECT_NEAR(m.phases.data_wait_ms, 20, 1e-6);
  EXPECT_NEAR(m.phases.other_ms, 80, 1e-6);
  EXPECT_NEAR(m.loss, 1.5, 1e-9);  // the finite losses only
  EXPECT_LT(m.spread, 1e-6);
  // Rank 0's lines stand for the job: samples × world.
  EXPECT_NEAR(measure_exec_steps(steps, 1, 4).samples_per_s, 400, 1e-6);
  // One step cannot be timed.
  EXPECT_EQ(measure_exec_steps({step(1, 10)}, 0, 1).samples_per_s, 0);
}

TEST(ExecMeasure, QualityFromTheLastEvalElseTheLossCurve) {
  ExecRun run;
  run.steps = {step(1, 8, -1, 4.0), step(2, 8, -1, 3.0), step(3, 8, -1, 2.0),
               step(4, 8, -1, 1.0)};
  ExecQuality q = exec_quality(run);
  EXPECT_FALSE(q.from_eval);
  EXPECT_NEAR(q.value, -1.0, 1e-9);  // the last quarter: one step
  ExecEval e;
  e.name = "val_loss";
  e.value = 0.7;
  run.evals = {e};
  q = exec_quality(run);
  EXPECT_EQ(q.metric, "-val_loss");
  EXPECT_NEAR(q.value, -0.7, 1e-9);
  e.name = "accuracy";
  e.value = 0.9;
  e.higher_is_better = true;
  run.evals.push_back(e);
  EXPECT_NEAR(exec_quality(run).value, 0.9, 1e-9);
}

}  // namespace
}  // namespace saturate
