// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/adaptive_batch.h"

#include <cmath>

#include "saturate/core/error.h"
#include "saturate/core/units.h"

namespace saturate {

using detail::concat;

double gain_lr_multiplier(double gain, OptimizerKind optimizer) {
  return optimizer == OptimizerKind::kSgd ? gain : std::sqrt(gain);
}

std::string gain_rule_name(OptimizerKind optimizer) {
  return optimizer == OptimizerKind::kSgd ? "gain rule (AdaScale) for SGD"
                                          : "square root of the gain (AdaptDL) for AdamW";
}

double curve_samples_per_s(const std::vector<std::pair<int64_t, double>>& curve, int64_t batch) {
  for (const auto& [b, sps] : curve)
    if (b == batch) return sps;
  return 0;
}

std::optional<BatchChange> next_batch_change(const AdaptiveBatchRule& rule, int64_t current,
                                             const NoiseScaleEstimate& noise, int64_t step) {
  if (noise.steps < kNoiseMinSteps || !std::isfinite(noise.low) || noise.low < 0 ||
      rule.b0 <= 0 || current <= 0)
    return std::nullopt;
  const int64_t to = 2 * current;
  const double x = curve_samples_per_s(rule.curve, current);
  const double x2 = curve_samples_per_s(rule.curve, to);
  if (x <= 0 || x2 <= 0) return std::nullopt;
  const double w = static_cast<double>(rule.world);
  const double phi = noise.low;
  const double global = w * static_cast<double>(current), global2 = w * static_cast<double>(to);
  // Goodput's ratio: the samples/s ratio times the ratio of efficiencies (both against B0).
  const double speedup = x2 * (phi + global) / (x * (phi + global2));
  if (speedup < 1 + rule.min_gain) return std::nullopt;
  BatchChange c;
  c.step = step;
  c.from = current;
  c.to = to;
  c.phi = phi;
  c.gain = gain_ratio(phi, w * static_cast<double>(rule.b0), global2);
  c.lr_multiplier = gain_lr_multiplier(c.gain, rule.optimizer);
  c.predicted_speedup = speedup;
  c.why = concat("φ ≥ ", format_fixed(phi, 0), " (", noise.steps, " steps): batch ", to, " runs ",
                 format_fixed(x2 / x, 2), "× the samples/s of ", current,
                 " with each sample worth ", format_fixed((phi + global) / (phi + global2), 2),
                 " as much: predicted ", format_fixed(speedup, 2),
                 "× as fast to a target; learning rate ×", format_fixed(c.lr_multiplier, 2),
                 " of the starting one (gain ", format_fixed(c.gain, 2), ", ",
                 gain_rule_name(rule.optimizer), ")");
  return c;
}

}  // namespace saturate
