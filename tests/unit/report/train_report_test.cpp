// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/train_report.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "saturate/report/compare.h"

namespace saturate {
namespace {

TrainReport two_rank_run() {
  TrainReport r;
  r.model = "fmnist-cnn";
  r.data = "fashion-mnist";
  r.device = "cpu";
  r.threads = 2;
  r.world_size = 2;
  r.options.batch_size = 32;
  r.summary.steps = 100;
  r.summary.epochs = 0.5;
  r.summary.samples = 3200;
  r.summary.samples_per_s = 1000;
  r.summary.final_loss = 0.5;
  r.summary.test_accuracy = 0.875;
  r.summary.test_loss = 0.4;
  r.summary.phases.step_ms = 32;
  r.summary.phases.communication_ms = 2;
  return r;
}

TEST(TrainReport, TableShowsTheJobAcrossRanks) {
  std::ostringstream out;
  write_train_table(out, two_rank_run());
  const std::string t = out.str();
  EXPECT_NE(t.find("saturate train: fmnist-cnn on fashion-mnist, cpu, 2 threads\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("  steps           100 (0.50 epochs, batch 32 per rank × 2 ranks = 64)\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("  samples/s       2000.0 (steady state, 2 ranks in step: 1000.0 on rank 0)\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find(", communication 2.00\n"), std::string::npos) << t;
  EXPECT_NE(t.find("  test accuracy   87.50 %\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("val accuracy"), std::string::npos) << "no validation split: no row";
}

TEST(TrainReport, JsonNullsWhatWasNotEvaluated) {
  const nlohmann::json j = train_report_to_json(two_rank_run());
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["global_batch_size"], 64);
  EXPECT_DOUBLE_EQ(j["job_samples_per_s"].get<double>(), 2000.0);
  EXPECT_TRUE(j["val_accuracy"].is_null());
  EXPECT_DOUBLE_EQ(j["test_accuracy"].get<double>(), 0.875);
  EXPECT_TRUE(j["divergence"].is_null());
  EXPECT_DOUBLE_EQ(j["phases_ms"]["step"].get<double>(), 32.0);
  EXPECT_TRUE(j.contains("context"));
}

TEST(TrainReport, DivergenceNullsNonFiniteNumbers) {
  Divergence d;
  d.step = 7;
  d.reason = "the loss is nan";
  d.grad_norms = {1.0, std::nan("")};
  const nlohmann::json j = divergence_to_json(d);
  EXPECT_EQ(j["step"], 7);
  EXPECT_TRUE(j["last_finite_loss"].is_null());
  EXPECT_TRUE(j["grad_norms"][1].is_null());
}

TEST(TrainReport, CompareReadsTheSummaryAsATrainRun) {
  // Issue 34: the summary carries phases_ms too, and compare took it for a profile (so it never
  // compared the final loss or the test accuracy).
  const RunMetrics m = run_metrics_from_json(train_report_to_json(two_rank_run()), "s.json");
  EXPECT_EQ(m.kind, "train");
  EXPECT_DOUBLE_EQ(m.samples_per_s, 1000.0);
  EXPECT_DOUBLE_EQ(m.final_loss, 0.5);
  EXPECT_DOUBLE_EQ(m.test_accuracy, 87.5);
  EXPECT_EQ(m.workload, "fmnist-cnn on fashion-mnist, cpu, batch 32, fp32");
}

}  // namespace
}  // namespace saturate
