// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/noise_scale_json.h"

#include <cmath>

namespace saturate {

nlohmann::json noise_scale_to_json(const NoiseScaleEstimate& e) {
  using json = nlohmann::json;
  if (e.steps == 0) return nullptr;
  auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  return {{"phi", number(e.phi)},
          {"low", number(e.low)},
          {"high", number(e.high)},
          {"resolved", e.is_resolved()},
          {"steps", e.steps},
          {"b_small", e.b_small},
          {"b_big", e.b_big}};
}

}  // namespace saturate
