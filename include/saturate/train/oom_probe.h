// SPDX-License-Identifier: Apache-2.0
#pragma once
// OOM as a value: run one step and report whether it fit and how much memory it peaked at.
// Only c10::OutOfMemoryError is caught — by type, never by message — and only around the step;
// everything else propagates.
//
//   ProbeResult r = probe_once([&] { step(batch); }, *memory);
//   if (r.outcome == ProbeOutcome::kOutOfMemory) { /* smaller batch */ }

#include <cstdint>
#include <functional>
#include <string>

namespace saturate {

class DeviceMemory;

enum class ProbeOutcome { kFits, kOutOfMemory };

struct ProbeResult {
  ProbeOutcome outcome = ProbeOutcome::kFits;
  int64_t peak_memory_bytes = 0;      ///< peak live bytes during the step (up to the failure on OOM)
  int64_t baseline_bytes = 0;  ///< live bytes before the step
  double step_ms = 0.0;        ///< wall time of the step (or of the attempt)
  std::string message;         ///< the allocator's message on OOM ("tried to allocate ...")
};

/// Resets the peak counter, runs `step` and returns its outcome. The exception is caught and
/// the catch block left before anything else happens, so the failed step's stack (and the
/// tensors it held) is gone when the caller cleans up. The caller restores model state and
/// calls memory.release_cached() afterwards (Trainer::probe does both).
ProbeResult probe_once(const std::function<void()>& step, DeviceMemory& memory);

std::string to_string(ProbeOutcome outcome);  ///< "fits" | "oom"

}  // namespace saturate
