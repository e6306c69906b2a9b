// SPDX-License-Identifier: Apache-2.0
#pragma once
// Steady-state throughput from step records: warm-up excluded, samples/s per window of steps,
// the median of the windows, and how much the windows disagree — the number the tuner uses to
// decide whether a measurement is good enough.
//
//   ThroughputStats t = steady_throughput(records, /*warmup_steps=*/5, /*window_steps=*/10);
//   if (t.spread_pct < 3.0) accept(t.samples_per_s);

#include <cstdint>
#include <vector>

#include "saturate/telemetry/step_record.h"

namespace saturate {

struct ThroughputStats {
  double samples_per_s = 0.0;  ///< median over windows of (window samples / window time)
  double mean_samples_per_s = 0.0;  ///< all steady steps' samples over their total time
  /// Median absolute deviation of the window rates relative to their median, in percent
  /// (robust to one outlier window); 0 with a single window.
  double spread_pct = 0.0;
  int64_t windows = 0;
  std::vector<double> window_samples_per_s;  ///< each window's rate, in step order
  int64_t steps = 0;  ///< steady-state steps used
};

/// The median of `values` (0 when empty); the one median the measurements share.
double median(std::vector<double> values);

/// Relative standard error of the mean of `values` (per-step rates): sd / sqrt(n) / mean, at
/// least `floor` (a lucky run of identical steps claims no certainty); `fallback` with fewer
/// than 2 values. The one noise estimate the tuner's comparisons share.
double relative_standard_error(const std::vector<double>& values, double floor = 0.005,
                               double fallback = 0.05);

/// Drops the first `warmup_steps` records (none when that would leave nothing), cuts the rest
/// into consecutive windows of `window_steps` (the last window, when shorter than half a
/// window, joins the one before) and summarises them. window_steps <= 0 means one window.
ThroughputStats steady_throughput(const std::vector<StepRecord>& records, int64_t warmup_steps,
                                  int64_t window_steps);

}  // namespace saturate
