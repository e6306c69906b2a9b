// SPDX-License-Identifier: Apache-2.0
#pragma once
// Nvml: reads GPU telemetry through libnvidia-ml, loaded with dlopen at run time, so saturate
// builds and runs on machines without the NVIDIA driver (is_loaded() is then false).
//
//   Nvml nvml;                        // or Nvml("/path/to/libnvidia-ml.so.1")
//   if (!nvml.is_loaded()) log(nvml.unavailable_reason());
//   for (const GpuSample& g : nvml.sample()) ...

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "saturate/telemetry/device_sample.h"

namespace saturate {

/// Names of the set bits of an NVML clock throttle (event) reason mask, lowest bit first, e.g.
/// 0x44 -> {"sw_power_cap", "hw_thermal_slowdown"}. Bits NVML does not document are skipped.
std::vector<std::string> nvml_throttle_reason_names(uint64_t reasons);

/// A loaded and initialised NVML, shut down and unloaded on destruction. Never throws: an absent
/// or failing library leaves it unloaded with a reason. sample() may be called from any thread
/// (NVML is thread-safe); construction and destruction must not race with it.
class Nvml {
 public:
  /// Loads `library_path`; when empty, $SATURATE_NVML_LIBRARY, else "libnvidia-ml.so.1".
  explicit Nvml(const std::string& library_path = "");
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool is_loaded() const;
  /// Why is_loaded() is false ("no NVML: <path> cannot be loaded (<dlerror>)",
  /// "NVML init failed (code N)", a missing required symbol); empty when loaded.
  const std::string& unavailable_reason() const;
  /// The library path that was tried.
  const std::string& library_path() const { return library_path_; }
  /// GPUs NVML reports now; 0 when not loaded or the query fails.
  int device_count() const;

  /// One reading of every GPU, in NVML index order; empty when not loaded. A field whose query
  /// fails, or whose function this driver lacks, stays -1 (throttle_reasons 0).
  std::vector<GpuSample> sample() const;

  /// A process using a GPU, and the GPU memory it holds.
  struct Process {
    int gpu = 0;
    int64_t pid = 0;
    int64_t used_bytes = 0;  ///< -1: NVML cannot say (some drivers in some modes)
  };
  /// The compute processes on every GPU now; empty when not loaded or the driver lacks the
  /// call (nvmlDeviceGetComputeRunningProcesses_v3, else _v2).
  std::vector<Process> processes() const;

 private:
  struct Api;
  std::string library_path_;
  std::string unavailable_reason_;
  std::unique_ptr<Api> api_;  // null unless loaded and initialised
};

}  // namespace saturate
