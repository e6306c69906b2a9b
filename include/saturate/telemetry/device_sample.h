// SPDX-License-Identifier: Apache-2.0
#pragma once
// DeviceSample: one reading of the host CPUs and every visible GPU, taken by DeviceSampler.
// Plain data with no NVML or LibTorch types; GPU fields hold -1 when the driver did not report
// them (old GPU, missing NVML symbol, failed call).
//
//   for (const GpuSample& g : sampler.latest().gpus) use(g.util_pct, g.power_w);

#include <cstdint>
#include <string>
#include <vector>

namespace saturate {

/// One GPU at one instant, as NVML reports it. Every numeric field is -1 when not reported.
struct GpuSample {
  int index = 0;                 ///< NVML device index.
  std::string name;              ///< product name, empty when not reported.
  double util_pct = -1;          ///< kernel duty cycle over the driver's period; not SM occupancy.
  int64_t mem_used_bytes = -1;   ///< device memory allocated by all contexts (includes caches).
  int64_t mem_total_bytes = -1;  ///< installed device memory.
  double temperature_c = -1;     ///< GPU die temperature.
  double power_w = -1;           ///< board power; a 1 s average on Ampere (not GA100) and newer.
  double energy_j = -1;          ///< energy counter since the driver loaded (Volta+); use deltas.
  double sm_clock_mhz = -1;      ///< current SM clock.
  uint64_t throttle_reasons = 0;  ///< NVML clock throttle (event) reason bitmask, 0 when none.
  std::vector<std::string> throttle_names;  ///< the set bits as snake_case names, low bit first.
};

/// The host CPUs and this process.
struct CpuSample {
  double util_pct = 0;                  ///< all cores busy share since the previous reading.
  std::vector<double> per_core_util_pct;  ///< per core, same window; empty when /proc is missing.
  int64_t process_rss_bytes = 0;        ///< resident set size of this process (VmRSS).
};

/// One sampler tick.
struct DeviceSample {
  double t_s = 0;  ///< seconds since the sampler started (steady clock).
  CpuSample cpu;
  std::vector<GpuSample> gpus;  ///< empty without NVML.
};

}  // namespace saturate
