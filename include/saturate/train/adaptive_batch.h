// SPDX-License-Identifier: Apache-2.0
#pragma once
// Adaptive batch (`train --adaptive-batch`, after AdaptDL): as training goes on the gradient
// noise scale φ grows, and a batch that wasted samples early stops wasting them. Every few
// steps the run asks whether doubling its batch would reach a target sooner: goodput at 2B over
// goodput at B is x(2B)(φ + B)/(x(B)(φ + 2B)), with x the measured samples/s and φ the
// interval's lower end. The learning rate follows the gain rule (AdaScale's r for SGD, its
// square root for AdamW), from the run's starting batch and LR.
//
// With a plan, x is the plan's curve: the batch only grows, one doubling at a time, never past
// the largest batch the plan measured. Without one, x is what the run itself measures: a
// doubling that could pay (at twice the samples/s) is tried for a while and measured, then
// kept if the measurement says it pays and undone otherwise; a batch once measured is never
// tried again, so a run tries each size at most once.
//
//   AdaptiveBatchRule rule{.b0 = 64, .world = 1, .curve = plan_curve,
//                          .optimizer = OptimizerKind::kAdamW};
//   if (auto c = next_batch_change(rule, /*current=*/64, noise.estimate()))
//     grow_to(c->to), lr = base_lr * c->lr_multiplier;

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "saturate/telemetry/noise_scale.h"
#include "saturate/train/train_options.h"

namespace saturate {

/// The LR multiplier of the gain rule for `optimizer` at gain r: r for SGD (AdaScale), √r for
/// AdamW (AdaptDL's AdamScale).
double gain_lr_multiplier(double gain, OptimizerKind optimizer);
/// "gain rule (AdaScale) for SGD" | "square root of the gain (AdaptDL) for AdamW".
std::string gain_rule_name(OptimizerKind optimizer);

struct AdaptiveBatchRule {
  int64_t b0 = 0;  ///< the run's starting batch per rank (its LR is the base LR)
  int world = 1;   ///< ranks: φ is in global samples, so efficiency is taken at world × batch
  /// Measured samples/s per rank by batch per rank, ascending (a plan's goodput curve, or what
  /// the run measured so far).
  std::vector<std::pair<int64_t, double>> curve;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  double min_gain = 0.05;  ///< predicted goodput gain a doubling needs (AdaptDL's 5%)
};

/// One change of batch during a run, as the sinks and the summary report it.
struct BatchChange {
  int64_t step = 0;  ///< the first optimizer step at the new batch
  int64_t from = 0, to = 0;  ///< batch per rank
  double phi = 0;            ///< φ credited (the interval's lower end), global samples
  double gain = 1;           ///< r(φ, b0, to) at the global batches
  double lr_multiplier = 1;  ///< of the base LR
  double predicted_speedup = 1;  ///< goodput at `to` over goodput at `from`
  /// "grow" (predicted from measured samples/s), "try" (the doubled batch is run to measure it;
  /// predicted_speedup is then the most it could give, at twice the samples/s) or "undo" (a
  /// tried batch measured too slow: back to `to`).
  std::string kind = "grow";
  std::string why;
};

/// Samples/s at `batch` on the curve, only at a measured batch (0 elsewhere: no throughput is
/// credited that was not measured).
double curve_samples_per_s(const std::vector<std::pair<int64_t, double>>& curve, int64_t batch);

/// Whether to double `current` now, given the run's noise-scale estimate: not before
/// kNoiseMinSteps measured steps, not without a finite lower bound, not past the curve, and
/// only when the predicted goodput gain is at least min_gain. `step` goes into the change.
std::optional<BatchChange> next_batch_change(const AdaptiveBatchRule& rule, int64_t current,
                                             const NoiseScaleEstimate& noise, int64_t step);

/// Without a measured 2 × `current` (a run without a plan): whether to try it. Under the same
/// conditions on the estimate as next_batch_change, it is tried when `current` is measured and
/// the doubling could pay at all: at twice the samples/s (more than a doubling rarely gives)
/// goodput would rise by min_gain. The change is of kind "try".
std::optional<BatchChange> next_batch_trial(const AdaptiveBatchRule& rule, int64_t current,
                                            const NoiseScaleEstimate& noise, int64_t step);

/// The change back from tried batch `tried` to half of it, why in numbers from the measured
/// curve (kind "undo"); `lr_multiplier` is the one before the trial.
BatchChange undo_batch_trial(const AdaptiveBatchRule& rule, int64_t tried,
                             const NoiseScaleEstimate& noise, int64_t step, double lr_multiplier);

}  // namespace saturate
