// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "saturate/core/error.h"
#include "testing/error_of.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

// 30 windows around `mean` samples/s with a 4% standard deviation (what profile windows of a
// CPU run show here), from `seed`.
std::vector<double> windows(double mean, uint64_t seed, int n = 30) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.04 * mean);
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(mean + noise(rng));
  return out;
}

nlohmann::json profile(const std::vector<double>& w, int64_t peak = 100 << 20) {
  std::vector<double> sorted = w;
  std::sort(sorted.begin(), sorted.end());
  return {{"schema_version", 1},       {"model", "fmnist-cnn"}, {"data", "fashion-mnist"},
          {"device", "cpu"},           {"batch_size", 64},      {"precision", "fp32"},
          {"samples_per_s", sorted[sorted.size() / 2]},
          {"samples_per_s_spread_pct", 3.0},
          {"window_samples_per_s", w}, {"step_ms", 50.0},       {"peak_memory_bytes", peak},
          {"phases_ms", {{"forward", 20.0}}}};
}

TEST(Compare, SameConfigRerunsAreWithinNoise) {
  // Over many seeded reruns of one distribution, almost none is called a change.
  int flagged = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const RunMetrics a = run_metrics_from_json(profile(windows(1000, seed)), "a.json");
    const RunMetrics b = run_metrics_from_json(profile(windows(1000, seed + 1000)), "b.json");
    flagged += compare_runs(a, b).has_regression() ? 1 : 0;
  }
  EXPECT_LE(flagged, 2) << "false regressions in 200 same-config pairs";
}

TEST(Compare, InjectedTenPercentSlowdownIsARegression) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const RunMetrics a = run_metrics_from_json(profile(windows(1000, seed)), "a.json");
    const RunMetrics b = run_metrics_from_json(profile(windows(900, seed + 1000)), "b.json");
    const Comparison c = compare_runs(a, b);
    ASSERT_TRUE(c.has_regression()) << "seed " << seed;
    EXPECT_EQ(c.metrics[0].name, "samples_per_s");
    EXPECT_EQ(c.metrics[0].verdict, Verdict::kRegression);
    EXPECT_NEAR(c.metrics[0].delta_pct, -10.0, 3.0);
    EXPECT_NE(c.metrics[0].basis.find("Mann-Whitney"), std::string::npos);
    // And the other way round it is an improvement, not a regression.
    const Comparison back = compare_runs(b, a);
    EXPECT_FALSE(back.has_regression());
    EXPECT_EQ(back.metrics[0].verdict, Verdict::kImprovement);
  }
}

TEST(Compare, SignificantButTinyChangesAreWithinNoise) {
  // 1% apart with almost no noise: significant, but under --min-change.
  std::vector<double> a(30, 1000.0), b(30, 990.0);
  for (int i = 0; i < 30; ++i) {
    a[i] += 0.01 * i;
    b[i] += 0.01 * i;
  }
  const Comparison c = compare_runs(run_metrics_from_json(profile(a), "a"),
                                    run_metrics_from_json(profile(b), "b"));
  EXPECT_EQ(c.metrics[0].verdict, Verdict::kWithinNoise);
}

TEST(Compare, WithoutWindowsTheSpreadsSetTheBand) {
  nlohmann::json a = {{"samples_per_s", 1000.0}, {"final_loss", 0.5}, {"model", "m"},
                      {"steps", 10}};
  nlohmann::json b = a;
  b["samples_per_s"] = 960.0;  // 4%: a train summary states no spread, so a 10% band holds it
  Comparison c = compare_runs(run_metrics_from_json(a, "a"), run_metrics_from_json(b, "b"));
  EXPECT_FALSE(c.has_regression());
  b["samples_per_s"] = 850.0;
  c = compare_runs(run_metrics_from_json(a, "a"), run_metrics_from_json(b, "b"));
  EXPECT_TRUE(c.has_regression());
}

TEST(Compare, MemoryAccuracyAndLoss) {
  const auto w = windows(1000, 1);
  Comparison c = compare_runs(run_metrics_from_json(profile(w, 100 << 20), "a"),
                              run_metrics_from_json(profile(w, 110 << 20), "b"));
  ASSERT_EQ(c.metrics.size(), 3u);  // samples/s, step ms, peak memory
  EXPECT_EQ(c.metrics[2].name, "peak_memory_bytes");
  EXPECT_EQ(c.metrics[2].verdict, Verdict::kRegression);
  c = compare_runs(run_metrics_from_json(profile(w, 100 << 20), "a"),
                   run_metrics_from_json(profile(w, 103 << 20), "b"));
  EXPECT_FALSE(c.has_regression());

  nlohmann::json a = {{"samples_per_s", 1000.0}, {"final_loss", 0.50}, {"test_accuracy", 0.90}};
  nlohmann::json b = a;
  b["test_accuracy"] = 0.88;  // 2 points down
  c = compare_runs(run_metrics_from_json(a, "a"), run_metrics_from_json(b, "b"));
  EXPECT_TRUE(c.has_regression());
  b["test_accuracy"] = 0.895;
  b["final_loss"] = 0.60;  // 20% higher
  c = compare_runs(run_metrics_from_json(a, "a"), run_metrics_from_json(b, "b"));
  EXPECT_TRUE(c.has_regression());
  b["final_loss"] = 0.52;
  c = compare_runs(run_metrics_from_json(a, "a"), run_metrics_from_json(b, "b"));
  EXPECT_FALSE(c.has_regression());
}

TEST(Compare, Issue36_ATrainRunThatDivergedOrLostValidationAccuracyFailsTheGate) {
  // Train summaries with phases (train has them too, so it is not read as a profile).
  nlohmann::json a = {{"samples_per_s", 1000.0}, {"final_loss", 0.40}, {"test_accuracy", 0.84},
                      {"val_accuracy", 0.85},    {"phases_ms", {{"forward", 1.0}}},
                      {"divergence", nullptr}};
  nlohmann::json b = a;
  b["samples_per_s"] = 1500.0;  // faster...
  b["final_loss"] = nullptr;    // ...and wrecked: no finite loss, no evaluation
  b["test_accuracy"] = nullptr;
  b["val_accuracy"] = nullptr;
  b["divergence"] = {{"step", 12}, {"reason", "non-finite loss"}};
  const RunMetrics ma = run_metrics_from_json(a, "a"), mb = run_metrics_from_json(b, "b");
  EXPECT_EQ(mb.kind, "train");
  Comparison c = compare_runs(ma, mb);
  EXPECT_TRUE(c.has_regression());
  ASSERT_TRUE(std::any_of(c.metrics.begin(), c.metrics.end(), [](const MetricComparison& m) {
    return m.name == "diverged" && m.verdict == Verdict::kRegression &&
           m.basis.find("at step 12: non-finite loss") != std::string::npos;
  }));
  EXPECT_NE(c.quality_judged.find("divergence"), std::string::npos) << c.quality_judged;
  EXPECT_NE(c.quality_judged.find("not judged: val_accuracy_pct (only A has it)"),
            std::string::npos)
      << c.quality_judged;
  // Validation accuracy 3 points down at the same test accuracy: a regression of its own.
  b = a;
  b["val_accuracy"] = 0.82;
  c = compare_runs(ma, run_metrics_from_json(b, "b"));
  EXPECT_TRUE(c.has_regression());
  EXPECT_EQ(c.quality_judged, "val_accuracy_pct, test_accuracy_pct, final_loss");
  // Two profiles: speed only, and the line says so.
  c = compare_runs(run_metrics_from_json(profile(windows(1000, 3)), "p"),
                   run_metrics_from_json(profile(windows(1000, 3)), "q"));
  EXPECT_EQ(c.quality_judged, "none: a profile measures speed only");
}

TEST(Compare, ReadsPlansAndNotesDifferentWorkloads) {
  nlohmann::json plan = {{"model", "fmnist-cnn"}, {"data", "fashion-mnist"}, {"device", "cpu"},
                         {"config", {{"batch_size", 209}, {"precision", "bf16"}}},
                         {"tuned", {{"samples_per_s", 2000.0}, {"spread", 0.02},
                                    {"peak_memory_bytes", 72 << 20},
                                    {"validation_metric", 0.89}, {"final_loss", 0.31}}}};
  const RunMetrics m = run_metrics_from_json(plan, "plan.json");
  EXPECT_EQ(m.kind, "plan");
  EXPECT_DOUBLE_EQ(m.spread_pct, 2.0);
  EXPECT_DOUBLE_EQ(m.val_accuracy, 89.0);  // the guard's held-out split
  EXPECT_LT(m.test_accuracy, 0);
  const RunMetrics p = run_metrics_from_json(profile(windows(1000, 3)), "p.json");
  const Comparison c = compare_runs(p, m);
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("batch 64, fp32 vs fmnist-cnn on fashion-mnist, cpu, batch 209"),
            std::string::npos)
      << c.notes[0];
}

TEST(Compare, BadFilesNameTheFile) {
  testing::TempDir tmp;
  EXPECT_NE(testing::error_of([&] { read_run_metrics(tmp.file("missing.json")); })
                .find(tmp.file("missing.json")),
            std::string::npos);
  std::ofstream(tmp.file("bad.json")) << "{\"samples_per_s\": ";
  const std::string bad = testing::error_of([&] { read_run_metrics(tmp.file("bad.json")); });
  EXPECT_EQ(bad.rfind("compare: ", 0), 0u) << bad;
  EXPECT_NE(bad.find(tmp.file("bad.json")), std::string::npos) << bad;
  std::ofstream(tmp.file("other.json")) << "{\"hello\": 1}";
  EXPECT_NE(testing::error_of([&] { read_run_metrics(tmp.file("other.json")); })
                .find("not a profile"),
            std::string::npos);
  std::ofstream(tmp.file("w.json")) << "{\"samples_per_s\": 1, \"phases_ms\": {}, "
                                       "\"window_samples_per_s\": [1, \"x\"]}";
  EXPECT_NE(testing::error_of([&] { read_run_metrics(tmp.file("w.json")); })
                .find("window_samples_per_s"),
            std::string::npos);
}

TEST(Compare, MannWhitneyMatchesKnownValues) {
  // Identical samples: no evidence of a difference.
  EXPECT_NEAR(mann_whitney_p({1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}), 1.0, 1e-9);
  // Fully separated 10 vs 10: U = 0; z = (50 - 0.5) / sqrt(175) = 3.742, p = 0.000183.
  std::vector<double> lo, hi;
  for (int i = 0; i < 10; ++i) {
    lo.push_back(i);
    hi.push_back(100 + i);
  }
  EXPECT_NEAR(mann_whitney_p(lo, hi), 0.000183, 0.00001);
  EXPECT_DOUBLE_EQ(mann_whitney_p({1}, {2, 3}), 1.0);
}

}  // namespace
}  // namespace saturate
