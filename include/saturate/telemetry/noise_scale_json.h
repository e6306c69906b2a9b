// SPDX-License-Identifier: Apache-2.0
#pragma once
// A noise-scale estimate as JSON, in one shape wherever it is written: the train and profile
// summaries, the report and the plan's goodput block.

#include <nlohmann/json.hpp>

#include "saturate/telemetry/noise_scale.h"

namespace saturate {

/// {"phi", "low", "high", "resolved", "steps", "b_small", "b_big"} (non-finite values null);
/// null when nothing was measured.
nlohmann::json noise_scale_to_json(const NoiseScaleEstimate& estimate);

}  // namespace saturate
