// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/oom_probe.h"

#include <chrono>

#include <c10/util/Exception.h>

#include "saturate/core/strings.h"
#include "saturate/device/device_memory.h"

namespace saturate {

ProbeResult probe_once(const std::function<void()>& step, DeviceMemory& memory) {
  ProbeResult result;
  result.baseline_bytes = memory.snapshot().live_bytes;
  memory.reset_peak();
  bool out_of_memory = false;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    step();
  } catch (const c10::OutOfMemoryError& e) {
    // Copy what we need and leave: the exception and the unwound step's tensors die here.
    out_of_memory = true;
    result.message = first_line(e.what_without_backtrace());
  }
  result.step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  result.peak_memory_bytes = memory.snapshot().peak_memory_bytes;
  if (out_of_memory) result.outcome = ProbeOutcome::kOutOfMemory;
  return result;
}

std::string to_string(ProbeOutcome outcome) {
  return outcome == ProbeOutcome::kFits ? "fits" : "oom";
}

}  // namespace saturate
