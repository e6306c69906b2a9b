// SPDX-License-Identifier: Apache-2.0
#pragma once
// Goodput (Pollux): a batch's worth is its throughput times its statistical efficiency, the
// share of its samples that still make progress. With the gradient noise scale φ measured at the
// user's batch B0, a step of B samples makes r = B(φ + B0)/(B0(φ + B)) steps of B0's progress
// (AdaScale's gain), so its samples are worth E(B) = (φ + B0)/(φ + B) each. Time to a target
// then scales as 1 / (throughput × E): the batch stage picks the batch that minimises it and the
// learning rate by the gain, never by the batch ratio alone.
//
//   GoodputChoice g = choose_by_goodput(curve, /*b0=*/64, noise, "AdamW-preconditioned",
//                                       OptimizerKind::kAdamW);
//   if (g.chosen != 64) lr *= g.lr_multiplier;  // √r for AdamW, r for SGD

#include <cstdint>
#include <string>
#include <vector>

#include "saturate/telemetry/noise_scale.h"
#include "saturate/train/train_options.h"

namespace saturate {

/// A batch's measured throughput and what goodput makes of it.
struct GoodputPoint {
  int64_t batch = 0;
  double samples_per_s = 0;
  double efficiency = 1;  ///< E(B) at the φ the choice used
  double speedup = 1;     ///< predicted time to target at B0 over that at B
};

struct GoodputChoice {
  bool usable = false;  ///< φ was resolved and B0 measured: the choice below stands
  std::string why;      ///< one line with the numbers, whichever way it went
  NoiseScaleEstimate noise;
  std::string noise_kind;  ///< "raw" | "AdamW-preconditioned"
  double phi_used = 0;     ///< the interval's lower end: a larger batch is never credited more
  int64_t b0 = 0;
  int64_t chosen = 0;      ///< B0 when no batch pays
  double predicted_speedup = 1;
  double gain = 1;           ///< r at the chosen batch
  double lr_multiplier = 1;  ///< r for SGD (AdaScale), √r for AdamW (AdaptDL's AdamScale)
  std::string rule;          ///< which of the two
  std::vector<GoodputPoint> curve;  ///< the batches ≥ B0 that were measured
};

/// A larger batch must be predicted at least this much faster to the target (AdaptDL's 5%).
inline constexpr double kGoodputMinGain = 0.05;

/// Picks among `curve` (measured samples/s by batch; only batches ≥ b0 are candidates, as in
/// AdaptDL) the batch with the highest predicted goodput at φ = noise.low, also when the
/// interval has no upper end. Not usable with fewer than kNoiseMinSteps measured steps, without
/// a lower bound, or when b0 has no measurement; the why then says which.
GoodputChoice choose_by_goodput(const std::vector<std::pair<int64_t, double>>& curve, int64_t b0,
                                const NoiseScaleEstimate& noise, const std::string& noise_kind,
                                OptimizerKind optimizer, double min_gain = kGoodputMinGain);

/// The LR multiplier of the gain rule for `optimizer` at gain r: r for SGD, √r for AdamW.
double gain_lr_multiplier(double gain, OptimizerKind optimizer);
/// "gain rule (AdaScale) for SGD" | "square root of the gain (AdaptDL) for AdamW".
std::string gain_rule_name(OptimizerKind optimizer);

}  // namespace saturate
