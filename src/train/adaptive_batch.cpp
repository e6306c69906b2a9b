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

namespace {

BatchChange change_of(const char* kind, int64_t step, int64_t from, int64_t to, double phi) {
  BatchChange c;
  c.kind = kind;
  c.step = step;
  c.from = from;
  c.to = to;
  c.phi = phi;
  return c;
}

}  // namespace

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
  BatchChange c = change_of("grow", step, current, to, phi);
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

namespace {

bool estimate_usable(const AdaptiveBatchRule& rule, int64_t current, const NoiseScaleEstimate& n) {
  return n.steps >= kNoiseMinSteps && std::isfinite(n.low) && n.low >= 0 && rule.b0 > 0 &&
         current > 0;
}

// Efficiency of a sample at per-rank batch `to` relative to `from`: (φ + B)/(φ + 2B) globally.
double worth(const AdaptiveBatchRule& rule, double phi, int64_t from, int64_t to) {
  const double w = static_cast<double>(rule.world);
  return (phi + w * static_cast<double>(from)) / (phi + w * static_cast<double>(to));
}

}  // namespace

std::optional<BatchChange> next_batch_trial(const AdaptiveBatchRule& rule, int64_t current,
                                            const NoiseScaleEstimate& noise, int64_t step) {
  if (!estimate_usable(rule, current, noise)) return std::nullopt;
  const int64_t to = 2 * current;
  if (curve_samples_per_s(rule.curve, current) <= 0 || curve_samples_per_s(rule.curve, to) > 0)
    return std::nullopt;
  const double phi = noise.low;
  const double e = worth(rule, phi, current, to);
  const double best = 2 * e;
  if (best < 1 + rule.min_gain) return std::nullopt;
  BatchChange c = change_of("try", step, current, to, phi);
  const double w = static_cast<double>(rule.world);
  c.gain = gain_ratio(phi, w * static_cast<double>(rule.b0), w * static_cast<double>(to));
  c.lr_multiplier = gain_lr_multiplier(c.gain, rule.optimizer);
  c.predicted_speedup = best;
  c.why = concat("φ ≥ ", format_fixed(phi, 0), " (", noise.steps, " steps): each sample of batch ",
                 to, " is worth ", format_fixed(e, 2), " of one of ", current,
                 ", so it pays if it runs ≥ ", format_fixed((1 + rule.min_gain) / e, 2),
                 "× the samples/s; trying it to measure (learning rate ×",
                 format_fixed(c.lr_multiplier, 2), ", ", gain_rule_name(rule.optimizer), ")");
  return c;
}

BatchChange undo_batch_trial(const AdaptiveBatchRule& rule, int64_t tried,
                             const NoiseScaleEstimate& noise, int64_t step, double lr_multiplier) {
  const int64_t back = tried / 2;
  const double x = curve_samples_per_s(rule.curve, back);
  const double x2 = curve_samples_per_s(rule.curve, tried);
  const double phi = std::isfinite(noise.low) && noise.low >= 0 ? noise.low : 0;
  const double e = worth(rule, phi, back, tried);
  BatchChange c = change_of("undo", step, tried, back, phi);
  c.gain = 1;
  c.lr_multiplier = lr_multiplier;
  c.predicted_speedup = x > 0 ? x2 * e / x : 0;
  c.why = concat("batch ", tried, " measured ", format_fixed(x > 0 ? x2 / x : 0, 2),
                 "× the samples/s of ", back, " (", format_fixed(x2, 0), " against ",
                 format_fixed(x, 0), ") with each sample worth ", format_fixed(e, 2), " at φ ≥ ",
                 format_fixed(phi, 0), ": predicted ", format_fixed(c.predicted_speedup, 2),
                 "× as fast to a target (needs ≥ ", format_fixed(1 + rule.min_gain, 2),
                 "); back to ", back, ", and ", tried, " is not tried again");
  return c;
}

}  // namespace saturate
