// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/throughput.h"

#include <algorithm>
#include <cmath>

namespace saturate {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double relative_standard_error(const std::vector<double>& v, double floor, double fallback) {
  const size_t n = v.size();
  if (n < 2) return fallback;
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(n);
  if (!(mean > 0)) return fallback;
  for (double x : v) var += (x - mean) * (x - mean);
  var /= static_cast<double>(n - 1);
  return std::max(floor, std::sqrt(var / static_cast<double>(n)) / mean);
}

ThroughputStats steady_throughput(const std::vector<StepRecord>& records, int64_t warmup_steps,
                                  int64_t window_steps) {
  ThroughputStats out;
  size_t first = static_cast<size_t>(std::max<int64_t>(0, warmup_steps));
  if (first >= records.size()) first = 0;
  const size_t n = records.size() - first;
  out.steps = static_cast<int64_t>(n);
  if (n == 0) return out;
  const size_t window = window_steps > 0 ? static_cast<size_t>(window_steps) : n;

  std::vector<std::pair<double, double>> sums;  // (samples, ms) per window
  double all_samples = 0, all_ms = 0;
  for (size_t i = 0; i < n; ++i) {
    const StepRecord& r = records[first + i];
    if (i % window == 0) sums.emplace_back(0.0, 0.0);
    sums.back().first += static_cast<double>(r.samples);
    sums.back().second += r.step_ms;
    all_samples += static_cast<double>(r.samples);
    all_ms += r.step_ms;
  }
  // A short tail window is noise, not a measurement: fold it into the previous one.
  if (sums.size() > 1 && n % window != 0 && n % window < (window + 1) / 2) {
    sums[sums.size() - 2].first += sums.back().first;
    sums[sums.size() - 2].second += sums.back().second;
    sums.pop_back();
  }
  std::vector<double> rates;
  for (const auto& [samples, ms] : sums)
    if (ms > 0) rates.push_back(samples / (ms / 1000.0));
  out.windows = static_cast<int64_t>(rates.size());
  out.window_samples_per_s = rates;
  out.samples_per_s = median(rates);
  out.mean_samples_per_s = all_ms > 0 ? all_samples / (all_ms / 1000.0) : 0.0;
  if (rates.size() > 1 && out.samples_per_s > 0) {
    std::vector<double> dev;
    for (double r : rates) dev.push_back(std::fabs(r - out.samples_per_s));
    out.spread_pct = 100.0 * median(dev) / out.samples_per_s;
  }
  return out;
}

}  // namespace saturate
