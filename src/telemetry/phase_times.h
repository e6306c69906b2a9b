// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private: the per-step accumulator shared by the PhaseTimer implementations.

#include <array>
#include <vector>

#include "saturate/telemetry/phase_timer.h"

namespace saturate::detail {

inline constexpr size_t kPhaseCount = static_cast<size_t>(Phase::kCommunication) + 1;

struct PhaseTimes {
  std::array<double, kPhaseCount> ms{};
  double step_ms = 0.0;
  /// The marks in order (consecutive marks of one phase merged), when the timer keeps them.
  std::vector<PhaseSpan> spans;
  /// Writes the phases, step_ms and the non-negative remainder other_ms into `r`.
  void apply(StepRecord& r) const;
};

}  // namespace saturate::detail
