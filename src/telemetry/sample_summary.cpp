// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/sample_summary.h"

#include <algorithm>

namespace saturate {

SampleSummary summarize_samples(const std::vector<DeviceSample>& samples,
                                int64_t samples_trained) {
  SampleSummary s;
  s.count = static_cast<int64_t>(samples.size());
  if (samples.empty()) return s;
  double util_sum = 0, util_n = 0, power_sum = 0, power_n = 0;
  for (const auto& d : samples) {
    s.cpu_util_pct += d.cpu.util_pct / static_cast<double>(samples.size());
    s.process_rss_peak_bytes = std::max(s.process_rss_peak_bytes, d.cpu.process_rss_bytes);
    double power = 0;
    bool has_power = false;
    for (const auto& g : d.gpus) {
      if (g.util_pct >= 0) {
        util_sum += g.util_pct;
        util_n += 1;
      }
      if (g.power_w >= 0) {
        power += g.power_w;
        has_power = true;
      }
      s.gpu_temperature_max_c = std::max(s.gpu_temperature_max_c, g.temperature_c);
      for (const auto& name : g.throttle_names)
        if (std::find(s.throttle_reasons.begin(), s.throttle_reasons.end(), name) ==
            s.throttle_reasons.end())
          s.throttle_reasons.push_back(name);
    }
    if (has_power) {
      power_sum += power;
      power_n += 1;
    }
  }
  if (util_n > 0) s.gpu_util_pct = util_sum / util_n;
  if (power_n > 0) s.gpu_power_w = power_sum / power_n;
  // Energy: per GPU, the counter's rise between the first and last sample that report it.
  const auto& first = samples.front().gpus;
  const auto& last = samples.back().gpus;
  double energy = 0;
  bool has_energy = false;
  for (size_t i = 0; i < std::min(first.size(), last.size()); ++i) {
    if (first[i].energy_j >= 0 && last[i].energy_j >= first[i].energy_j) {
      energy += last[i].energy_j - first[i].energy_j;
      has_energy = true;
    }
  }
  if (has_energy) {
    s.gpu_energy_j = energy;
    if (samples_trained > 0) s.joules_per_sample = energy / static_cast<double>(samples_trained);
  }
  return s;
}

}  // namespace saturate
