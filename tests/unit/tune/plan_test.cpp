// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/plan.h"

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "saturate/core/error.h"
#include "saturate/core/json.h"
#include "testing/error_of.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

using nlohmann::json;
using testing::error_of;

RunConfig tuned_config() {
  RunConfig c;
  c.train.batch_size = 384;
  c.train.precision = Precision::kBf16;
  c.train.accumulate = 3;
  c.train.recompute_segments = 2;
  c.train.lr = 0.0123456789;
  c.train.warmup_steps = 25;
  c.train.optimizer = OptimizerKind::kSgd;
  c.train.schedule = ScheduleKind::kConstant;
  c.train.memory_format = MemoryFormat::kChannelsLast;
  c.train.seed = 18446744073709551615ull;  // the largest seed must survive the round trip
  c.threads = 6;
  return c;
}

Plan full_plan() {
  Plan p;
  p.model = "fmnist-cnn";
  p.data = "idx:/data/fmnist";
  p.device = "cuda:0";
  p.config = tuned_config();
  p.effective_batch = EffectiveBatchOutcome::kKept;
  p.effective_batch_why = "batch 384 as 3 micro-batches of 128 keeps the user's 384";
  p.memory_limit_bytes = int64_t{2} << 30;
  p.reserve = 0.15;
  p.baseline = {1234.5, 0.031, 123456789, 0.875, 0.3456, {1.5, 0.25, 10, 12, 2, 0, 0.5, 26.25}};
  p.tuned = {4321.25, 0.012, 987654321, 0.8725, 0.3501, {0.5, 0.25, 5, 6, 1, 0, 0.25, 13}};
  p.stages.push_back({"baseline", 0, 1234.5, false, "64, fp32: 1234.5 samples/s"});
  p.stages.push_back({"precision", 1234.5, 2500.75, true, "bf16 is 2.03x fp32"});
  PlanTrial fits{"batch_size", "memory probe", tuned_config(), true, 4100.5, 0.02, 900000000, 3};
  PlanTrial oom{"batch_size", "memory probe", tuned_config(), false, 0, 0, 0, 1};
  oom.config.train.batch_size = 768;
  oom.config.train.accumulate = 1;
  p.trials = {fits, oom};
  p.quality.baseline = 0.875;
  p.quality.tuned = 0.8725;
  p.quality.baseline_loss = 0.3456;
  p.quality.tuned_loss = 0.3501;
  p.quality.samples = 60000;
  p.quality.accepted = true;
  p.quality.why = "0.25 points below the baseline, within the 1-point tolerance";
  p.probe_steps = 42;
  p.tune_wall_s = 93.5;
  return p;
}

void expect_config_eq(const RunConfig& a, const RunConfig& b) {
  EXPECT_EQ(a.train.batch_size, b.train.batch_size);
  EXPECT_EQ(a.train.precision, b.train.precision);
  EXPECT_EQ(a.train.accumulate, b.train.accumulate);
  EXPECT_EQ(a.train.recompute_segments, b.train.recompute_segments);
  EXPECT_EQ(a.train.lr, b.train.lr);
  EXPECT_EQ(a.train.warmup_steps, b.train.warmup_steps);
  EXPECT_EQ(a.train.optimizer, b.train.optimizer);
  EXPECT_EQ(a.train.schedule, b.train.schedule);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.train.memory_format, b.train.memory_format);
  EXPECT_EQ(a.threads, b.threads);
}

// A minimal valid plan with `config.<key>` set to `value`.
json plan_with_config(const std::string& key, const json& value) {
  json j = {{"schema_version", 1}, {"config", {{"batch_size", 128}}}};
  j["config"][key] = value;
  return j;
}

std::string config_error(const std::string& key, const json& value) {
  return error_of([&] { plan_from_json(plan_with_config(key, value), "plan.json"); });
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(Plan, RoundTripsThroughJson) {
  const Plan p = full_plan();
  const Plan q = plan_from_json(to_json(p), "plan.json");
  EXPECT_EQ(to_json(q), to_json(p));
  EXPECT_EQ(q.schema_version, kPlanSchemaVersion);
  EXPECT_EQ(q.model, p.model);
  EXPECT_EQ(q.data, p.data);
  EXPECT_EQ(q.device, p.device);
  expect_config_eq(q.config, p.config);
  EXPECT_EQ(q.effective_batch, EffectiveBatchOutcome::kKept);
  EXPECT_EQ(q.effective_batch_why, p.effective_batch_why);
  EXPECT_EQ(q.memory_limit_bytes, p.memory_limit_bytes);
  EXPECT_EQ(q.reserve, p.reserve);
  EXPECT_EQ(q.baseline.samples_per_s, 1234.5);
  EXPECT_EQ(q.tuned.peak_memory_bytes, 987654321);
  EXPECT_EQ(q.tuned.validation_metric, 0.8725);
  EXPECT_EQ(q.baseline.phases.backward_ms, 12);
  EXPECT_EQ(q.tuned.phases.step_ms, 13);
  ASSERT_EQ(q.stages.size(), 2u);
  EXPECT_EQ(q.stages[1].name, "precision");
  EXPECT_TRUE(q.stages[1].changed);
  EXPECT_EQ(q.stages[1].after_samples_per_s, 2500.75);
  ASSERT_EQ(q.trials.size(), 2u);
  EXPECT_TRUE(q.trials[0].fits);
  EXPECT_FALSE(q.trials[1].fits);
  EXPECT_EQ(q.trials[1].config.train.batch_size, 768);
  EXPECT_EQ(q.trials[0].purpose, "memory probe");
  expect_config_eq(q.trials[0].config, p.trials[0].config);
  EXPECT_EQ(q.quality.samples, 60000);
  EXPECT_TRUE(q.quality.accepted);
  EXPECT_EQ(q.quality.tuned_loss, 0.3501);
  EXPECT_EQ(q.probe_steps, 42);
  EXPECT_EQ(q.tune_wall_s, 93.5);
}

TEST(Plan, WritesTheIssuesKeysAndNames) {
  const json j = to_json(full_plan());
  for (const char* key : {"schema_version", "model", "data", "device", "config", "effective_batch",
                          "memory_limit_bytes", "reserve", "baseline", "tuned", "stages", "trials",
                          "quality", "probe_steps", "tune_wall_s"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["config"]["precision"], "bf16");
  EXPECT_EQ(j["config"]["optimizer"], "sgd");
  EXPECT_EQ(j["config"]["schedule"], "constant");
  EXPECT_EQ(j["config"]["workers"], 0);
  EXPECT_EQ(j["effective_batch"]["policy"], "kept");
  EXPECT_EQ(j["trials"][0]["outcome"], "fits");
  EXPECT_EQ(j["trials"][1]["outcome"], "oom");
  EXPECT_EQ(j["trials"][0]["config"]["batch_size"], 384);
}

TEST(Plan, RoundTripsThroughAFile) {
  testing::TempDir dir;
  const Plan p = full_plan();
  write_plan(p, dir.file("plan.json"));
  const Plan q = read_plan(dir.file("plan.json"));
  EXPECT_EQ(to_json(q), to_json(p));
  expect_config_eq(q.config, p.config);
}

TEST(Plan, MinimalHandWrittenPlanKeepsDefaults) {
  testing::TempDir dir;
  std::ofstream(dir.file("plan.json")) << R"({"schema_version": 1, "config": {"batch_size": 128}})";
  const Plan p = read_plan(dir.file("plan.json"));
  const TrainOptions defaults;
  EXPECT_EQ(p.config.train.batch_size, 128);
  EXPECT_EQ(p.config.train.precision, defaults.precision);
  EXPECT_EQ(p.config.train.accumulate, defaults.accumulate);
  EXPECT_EQ(p.config.train.recompute_segments, defaults.recompute_segments);
  EXPECT_EQ(p.config.train.lr, defaults.lr);
  EXPECT_EQ(p.config.train.warmup_steps, defaults.warmup_steps);
  EXPECT_EQ(p.config.train.optimizer, defaults.optimizer);
  EXPECT_EQ(p.config.train.schedule, defaults.schedule);
  EXPECT_EQ(p.config.train.seed, defaults.seed);
  EXPECT_EQ(p.config.train.memory_format, MemoryFormat::kContiguous);  // plans before issue 14
  EXPECT_EQ(p.config.threads, 0);
  EXPECT_EQ(p.model, "");
  EXPECT_EQ(p.data, "");
  EXPECT_EQ(p.effective_batch, EffectiveBatchOutcome::kUnchanged);
  EXPECT_TRUE(p.stages.empty());
  EXPECT_TRUE(p.trials.empty());
  EXPECT_EQ(p.quality.metric, "val_accuracy");
}

TEST(Plan, ReadsInputPipelineWorkersAndPrefetch) {
  const Plan p = plan_from_json(plan_with_config("workers", 4), "p.json");
  EXPECT_EQ(p.config.workers, 4);
  EXPECT_EQ(p.config.prefetch, 2);
  EXPECT_EQ(p.config.train.batch_size, 128);
  EXPECT_EQ(plan_from_json(plan_with_config("prefetch", 6), "p.json").config.prefetch, 6);
  EXPECT_NE(config_error("workers", -1).find("config.workers"), std::string::npos);
  EXPECT_NE(config_error("prefetch", 0).find("config.prefetch"), std::string::npos);
}

TEST(Plan, Issue15_WorldSizeIsReadWrittenAndChecked) {
  EXPECT_EQ(plan_from_json(plan_with_config("threads", 1), "p.json").config.world_size, 1);
  const Plan p = plan_from_json(plan_with_config("world_size", 2), "p.json");
  EXPECT_EQ(p.config.world_size, 2);
  EXPECT_EQ(to_json(p)["config"]["world_size"], 2);
  EXPECT_EQ(p.config.describe().rfind("batch 128 per rank × 2 ranks, ", 0), 0u) << p.config.describe();
  EXPECT_EQ(config_error("world_size", 0),
            "plan.json: config.world_size must be an integer in [1, 65536], got 0");
  EXPECT_CONTAINS(config_error("world_size", 70000), "config.world_size must be at most 65536");
}

TEST(Plan, Issue19_TensorParallelIsReadWrittenAndChecked) {
  json j = plan_with_config("world_size", 4);
  j["config"]["tensor_parallel"] = 2;
  const Plan p = plan_from_json(j, "p.json");
  EXPECT_EQ(p.config.tensor_parallel, 2);
  EXPECT_EQ(p.config.replicas(), 2);
  EXPECT_EQ(p.config.global_batch(), 256);
  EXPECT_EQ(to_json(p)["config"]["tensor_parallel"], 2);
  EXPECT_CONTAINS(p.config.describe(), "per replica × 2 replicas, 2-way tensor parallel");
  EXPECT_EQ(plan_from_json(plan_with_config("threads", 1), "p.json").config.tensor_parallel, 1);
  EXPECT_CONTAINS(config_error("tensor_parallel", 0), "config.tensor_parallel must be an integer");
  // 3 does not divide the world of 1.
  EXPECT_CONTAINS(config_error("tensor_parallel", 3),
                  "config.tensor_parallel (3) must divide config.world_size (1)");
  // Stages of shares: each replica is stages × shares ranks, which must divide the world.
  j["config"]["pipeline_stages"] = 2;
  j["config"]["world_size"] = 2;  // each alone divides it
  const std::string both = error_of([&] { plan_from_json(j, "plan.json"); });
  EXPECT_CONTAINS(both, "config.pipeline_stages (2) × config.tensor_parallel (2) must divide "
                        "config.world_size (2)");
  j["config"]["world_size"] = 8;
  j["config"]["micro_batches"] = 4;
  // Where the stages are cut: balanced unless the plan says; each stage's layer count, one per
  // stage, round-trips.
  EXPECT_EQ(plan_from_json(j, "p.json").config.pipeline_split, "balanced");
  j["config"]["pipeline_split"] = "3,1";
  EXPECT_EQ(to_json(plan_from_json(j, "p.json"))["config"]["pipeline_split"], "3,1");
  j["config"]["pipeline_split"] = "3,1,1";
  EXPECT_CONTAINS(error_of([&] { plan_from_json(j, "plan.json"); }),
                  "plan.json: config.pipeline_split: '3,1,1' gives more stages' layer counts for 2 stages");
  j["config"]["pipeline_split"] = "3,x";
  EXPECT_CONTAINS(error_of([&] { plan_from_json(j, "plan.json"); }),
                  "config.pipeline_split: '3,x' is not a split");
  j["config"]["pipeline_split"] = "even";
  const Plan both_ok = plan_from_json(j, "p.json");
  EXPECT_EQ(both_ok.config.ranks_per_replica(), 4);
  EXPECT_EQ(both_ok.config.replicas(), 2);
  EXPECT_CONTAINS(both_ok.config.describe(),
                  "per replica × 2 replicas, 2 pipeline stages × 4 micro-batches (1f1b, even "
                  "split) of 2-way tensor parallel");
}

TEST(Plan, BadBatchSizeNamesTheFileTheFieldAndTheValue) {
  const std::string e = config_error("batch_size", -3);
  EXPECT_EQ(e, "plan.json: config.batch_size must be a positive integer, got -3");
  EXPECT_CONTAINS(config_error("batch_size", 0), "config.batch_size");
  EXPECT_CONTAINS(config_error("batch_size", 1.5), "config.batch_size must be a positive integer");
  EXPECT_CONTAINS(config_error("batch_size", "128"), "got \"128\"");
}

TEST(Plan, EachBadConfigFieldIsAnErrorNamingItAndTheSource) {
  struct Case {
    const char* key;
    json value;
    const char* expected;
  };
  const Case cases[] = {
      {"precision", "bf61",
       "config.precision must be one of fp32, tf32, bf16, fp16, got \"bf61\"; "
       "did you mean 'bf16'?"},
      {"precision", "auto", "config.precision must be one of"},
      {"precision", 16, "config.precision must be a string, got 16"},
      {"accumulate", 0, "config.accumulate must be an integer >= 1, got 0"},
      {"accumulate", 256, "config.accumulate (256) must not exceed config.batch_size (128)"},
      {"recompute_segments", -1, "config.recompute_segments must be a non-negative integer"},
      {"lr", 0, "config.lr must be a positive number, got 0"},
      {"lr", "fast", "config.lr must be a positive number, got \"fast\""},
      {"warmup_steps", -2, "config.warmup_steps must be an integer >= -1"},
      {"optimizer", "adam",
       "config.optimizer must be one of sgd, adamw, got \"adam\"; did you "
       "mean 'adamw'?"},
      {"schedule", "linear", "config.schedule must be one of constant, cosine"},
      {"memory_format", "nhwc", "config.memory_format must be one of contiguous, channels-last"},
      {"memory_format", "channels_last",
       "got \"channels_last\"; did you mean 'channels-last'?"},
      {"threads", -1, "config.threads must be a non-negative integer, got -1"},
      {"seed", -7, "config.seed must be a non-negative integer, got -7"},
      {"batchsize", 64, "config.batchsize is not a plan field; did you mean 'batch_size'?"},
  };
  for (const Case& c : cases) {
    const std::string e = config_error(c.key, c.value);
    EXPECT_EQ(e.rfind("plan.json: ", 0), 0u) << e;
    EXPECT_CONTAINS(e, c.expected);
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(Plan, BadFieldsOutsideConfigNameTheirPath) {
  json j = to_json(full_plan());
  j["trials"][1]["outcome"] = "crashed";
  EXPECT_CONTAINS(error_of([&] { plan_from_json(j, "p.json"); }),
                  "p.json: trials[1].outcome must be one of fits, oom, got \"crashed\"");
  j = to_json(full_plan());
  j["trials"][0]["config"]["batch_size"] = 0;
  EXPECT_CONTAINS(error_of([&] { plan_from_json(j, "p.json"); }),
                  "p.json: trials[0].config.batch_size must be a positive integer, got 0");
  j = to_json(full_plan());
  j["effective_batch"]["policy"] = "doubled";
  EXPECT_CONTAINS(error_of([&] { plan_from_json(j, "p.json"); }), "effective_batch.policy");
  j = to_json(full_plan());
  j["reserve"] = 1.5;
  EXPECT_CONTAINS(error_of([&] { plan_from_json(j, "p.json"); }),
                  "p.json: reserve must be a fraction in [0, 1), got 1.5");
  j = to_json(full_plan());
  j["stages"] = json::array({"baseline"});
  EXPECT_CONTAINS(error_of([&] { plan_from_json(j, "p.json"); }),
                  "p.json: stages[0] must be an object, got \"baseline\"");
  j["stages"] = {{"name", "baseline"}};
  EXPECT_CONTAINS(error_of([&] { plan_from_json(j, "p.json"); }),
                  "p.json: stages must be an array");
  j = to_json(full_plan());
  j["model"] = 3;
  EXPECT_CONTAINS(error_of([&] { plan_from_json(j, "p.json"); }), "p.json: model must be a string");
  j = to_json(full_plan());
  j["config"] = 128;
  EXPECT_CONTAINS(error_of([&] { plan_from_json(j, "p.json"); }),
                  "p.json: config must be an object");
}

TEST(Plan, WrongOrMissingSchemaVersionIsAClearError) {
  const json v2 = {{"schema_version", 2}, {"config", {{"batch_size", 8}}}};
  const std::string e = error_of([&] { plan_from_json(v2, "plan.json"); });
  EXPECT_CONTAINS(e, "plan.json: schema_version 2 is not supported");
  EXPECT_CONTAINS(e, "reads version 1");
  const json none = {{"config", {{"batch_size", 8}}}};
  EXPECT_CONTAINS(error_of([&] { plan_from_json(none, "plan.json"); }),
                  "plan.json: schema_version is missing");
  const json text = {{"schema_version", "1"}, {"config", {{"batch_size", 8}}}};
  EXPECT_CONTAINS(error_of([&] { plan_from_json(text, "plan.json"); }), "schema_version");
}

TEST(Plan, NotAPlanIsAnErrorNamingTheFile) {
  // A run summary has a schema_version too, but no config.
  const json summary = {{"schema_version", 1}, {"batch_size", 32}};
  EXPECT_CONTAINS(error_of([&] { plan_from_json(summary, "s.json"); }),
                  "s.json: config is missing");
  EXPECT_CONTAINS(error_of([&] { plan_from_json(json::array(), "a.json"); }),
                  "a.json: a plan must be a JSON object");
}

TEST(Plan, UnreadableFileIsAnErrorNamingIt) {
  testing::TempDir dir;
  EXPECT_CONTAINS(error_of([&] { read_plan(dir.file("absent.json")); }), "absent.json");
  std::ofstream(dir.file("corrupt.json")) << R"({"schema_version": 1, "config": {)";
  EXPECT_CONTAINS(error_of([&] { read_plan(dir.file("corrupt.json")); }),
                  "corrupt.json: not valid JSON");
  std::ofstream(dir.file("bad.json")) << R"({"schema_version": 1, "config": {"lr": -1}})";
  EXPECT_CONTAINS(error_of([&] { read_plan(dir.file("bad.json")); }),
                  dir.file("bad.json") + ": config.lr must be a positive number, got -1");
}

TEST(Plan, UnwritablePathIsAnErrorNamingIt) {
  EXPECT_CONTAINS(error_of([&] { write_plan(full_plan(), "/proc/no-such-dir/plan.json"); }),
                  "/proc/no-such-dir/plan.json");
}

}  // namespace

TEST(Plan, Issue13_RoundTripsTheRecipeInputAndGuardFacts) {
  Plan p;
  p.config.train.momentum = 0.7;
  p.config.train.weight_decay = 0.02;
  p.config.train.eval_batch_size = 256;
  p.config.train.eval_every = 50;
  p.crop = 24;
  p.pad = 2;
  p.flip = true;
  p.cache = "1GiB";
  p.interrupted = true;
  p.budget_s = 240;
  p.quality.status = QualityStatus::kUnaffordable;
  p.quality.val_fraction = 0.05;
  p.quality.val_samples = 3000;
  p.quality.metric_noise = 0.004;
  const Plan q = plan_from_json(to_json(p), "p.json");
  EXPECT_DOUBLE_EQ(q.config.train.momentum, 0.7);
  EXPECT_DOUBLE_EQ(q.config.train.weight_decay, 0.02);
  EXPECT_EQ(q.config.train.eval_batch_size, 256);
  EXPECT_EQ(q.config.train.eval_every, 50);
  EXPECT_EQ(q.crop, 24);
  EXPECT_EQ(q.pad, 2);
  EXPECT_TRUE(q.flip);
  EXPECT_EQ(q.cache, "1GiB");
  EXPECT_TRUE(q.interrupted);
  EXPECT_DOUBLE_EQ(q.budget_s, 240);
  EXPECT_EQ(q.quality.status, QualityStatus::kUnaffordable);
  EXPECT_DOUBLE_EQ(q.quality.val_fraction, 0.05);
  EXPECT_EQ(q.quality.val_samples, 3000);
  EXPECT_DOUBLE_EQ(q.quality.metric_noise, 0.004);
  nlohmann::json j = to_json(p);
  j["input"]["crops"] = 3;
  EXPECT_THROW(plan_from_json(j, "p.json"), Error);
  j = to_json(p);
  j["config"]["eval_batch_size"] = 0;
  EXPECT_THROW(plan_from_json(j, "p.json"), Error);
}

}  // namespace saturate
