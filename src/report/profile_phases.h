// SPDX-License-Identifier: Apache-2.0
#pragma once
// The phases of a profile's step in the order both reporters list them.

#include <vector>

#include "saturate/telemetry/step_record.h"

namespace saturate::detail {

struct NamedPhase {
  const char* name;
  double ms;
};

inline std::vector<NamedPhase> named_phases(const PhaseBreakdown& p) {
  return {{"data_wait", p.data_wait_ms}, {"host_to_device", p.host_to_device_ms},
          {"forward", p.forward_ms},     {"backward", p.backward_ms},
          {"optimizer", p.optimizer_ms}, {"communication", p.communication_ms},
          {"other", p.other_ms}};
}

}  // namespace saturate::detail
