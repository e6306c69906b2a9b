// SPDX-License-Identifier: Apache-2.0
#pragma once
// Summarises a run's device samples: mean CPU and GPU utilisation, peak RSS, mean power and the
// energy the GPUs used (from NVML's energy counter), and so joules per sample.
//
//   SampleSummary s = summarize_samples(sampler.samples(), /*samples_trained=*/12800);

#include <cstdint>
#include <string>
#include <vector>

#include "saturate/telemetry/device_sample.h"

namespace saturate {

struct SampleSummary {
  int64_t count = 0;                 ///< device samples taken
  double cpu_util_pct = 0.0;         ///< mean over samples
  int64_t process_rss_peak_bytes = 0;
  double gpu_util_pct = -1.0;        ///< mean over samples and GPUs; -1 when no GPU reported it
  double gpu_power_w = -1.0;         ///< mean total power of all GPUs
  double gpu_energy_j = -1.0;        ///< energy counter difference, last - first sample
  double joules_per_sample = -1.0;   ///< gpu_energy_j / samples_trained
  double gpu_temperature_max_c = -1.0;
  std::vector<std::string> throttle_reasons;  ///< every reason seen, once each
};

SampleSummary summarize_samples(const std::vector<DeviceSample>& samples,
                                int64_t samples_trained);

}  // namespace saturate
