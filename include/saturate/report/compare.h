// SPDX-License-Identifier: Apache-2.0
#pragma once
// Comparing two measurements of the same workload (two `saturate profile --json` outputs, two
// plans, two train summaries): per-metric deltas with a verdict that knows the noise, so a CI
// job can fail on a real regression and not on a noisy rerun.
//
//   const RunMetrics a = read_run_metrics("before.json"), b = read_run_metrics("after.json");
//   const Comparison c = compare_runs(a, b);
//   if (c.has_regression()) return 1;
//
// Throughput is judged by the per-window samples/s when both files carry them (profile does):
// a Mann–Whitney U test between the two sets of windows, and a change counts only when it is
// both significant and larger than a minimum. Without windows, the change must exceed the two
// runs' stated spreads added together. Peak memory is nearly deterministic and has a fixed
// tolerance.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace saturate {

/// What one file measured. Unknown values are negative.
struct RunMetrics {
  std::string path;
  std::string kind;      ///< "profile", "plan" or "train"
  std::string workload;  ///< model, data, device, batch and precision, for the same-workload check
  double samples_per_s = -1;
  double spread_pct = -1;                    ///< relative spread of samples/s, when stated
  std::vector<double> window_samples_per_s;  ///< per-window rates, when present
  double step_ms = -1;
  int64_t peak_memory_bytes = -1;
  double final_loss = -1;
  double test_accuracy = -1;  ///< percent
  double val_accuracy = -1;   ///< percent: a train run's validation split, a plan's guard run
  /// A train run that diverged: why (empty: it did not).
  std::string diverged;
  /// A train run with --target: "val_accuracy=0.89", and its summed step time to reach it
  /// (-1: not reached or no target).
  std::string target;
  double time_to_target_s = -1;
};

/// Reads a profile, plan or train-summary JSON object. Throws saturate::Error "compare: PATH:
/// ..." for one that is none of these or whose fields have the wrong type.
RunMetrics run_metrics_from_json(const nlohmann::json& j, const std::string& path);
/// The same from a file; a missing or malformed file is an error naming it.
RunMetrics read_run_metrics(const std::string& path);

enum class Verdict { kWithinNoise, kImprovement, kRegression };
std::string to_string(Verdict v);  ///< "within noise" | "improvement" | "regression"

struct MetricComparison {
  std::string name;  ///< "samples_per_s", "step_ms", "peak_memory_bytes", …
  double a = 0, b = 0;
  double delta_pct = 0;  ///< (b - a) / a, in percent
  Verdict verdict = Verdict::kWithinNoise;
  std::string basis;  ///< how the verdict was reached, with its numbers
};

struct CompareOptions {
  /// A throughput change smaller than this is within noise however significant. The window test
  /// sees only the noise inside each run; whole runs drift too: three identical fmnist-cnn
  /// profiles on the 2-core CI machine differed by up to 4.0% with p = 0.001 (bench/RESULTS.md).
  double min_change_pct = 5.0;
  /// Significance level of the window test.
  double alpha = 0.01;
  /// Peak memory may grow this much before it is a regression (allocator rounding).
  double memory_tolerance_pct = 5.0;
  /// Validation accuracy may drop this much (absolute, in points) before it is a regression.
  double accuracy_tolerance_pts = 1.0;
};

struct Comparison {
  std::vector<MetricComparison> metrics;
  std::vector<std::string> notes;  ///< e.g. the two files measured different workloads
  /// The quality the verdict took in (val/test accuracy, final loss, divergence), or why none.
  std::string quality_judged;
  bool has_regression() const;
};

Comparison compare_runs(const RunMetrics& a, const RunMetrics& b, const CompareOptions& o = {});

/// Two-sided p-value of the Mann–Whitney U test (normal approximation with tie correction and
/// continuity correction) that `x` and `y` come from the same distribution. 1 when either has
/// fewer than 2 values.
double mann_whitney_p(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace saturate
