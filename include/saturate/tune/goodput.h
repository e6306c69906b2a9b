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
#include <limits>
#include <string>
#include <vector>

#include "saturate/telemetry/noise_scale.h"
#include "saturate/train/adaptive_batch.h"  // gain_lr_multiplier, gain_rule_name
#include "saturate/train/train_options.h"

namespace saturate {

/// A batch's measured throughput and what goodput makes of it.
struct GoodputPoint {
  int64_t batch = 0;
  double samples_per_s = 0;
  double efficiency = 1;  ///< E(B) at the φ the choice used
  double speedup = 1;     ///< predicted time to target at B0 over that at B
};

/// One batch the quality guard trained while searching the goodput curve: the efficiency it was
/// chosen by, what its run measured, and the φ the search credited afterwards.
struct GoodputBranch {
  int64_t batch = 0;
  double lr = 0;
  int64_t samples = 0;  ///< training samples its run got (equal wall time with the reference)
  double predicted_efficiency = 1;
  /// The reference's samples to the same training loss over this run's samples; NaN: not
  /// measured (no loss curve, or the run diverged).
  double measured_efficiency = std::numeric_limits<double>::quiet_NaN();
  bool diverged = false;  ///< non-finite, or no progress past the reference's first steps
  bool accepted = false;
  /// Passed on quality at equal time, but its measured efficiency times its samples/s over the
  /// user's batch's is below 1: it reaches the reference's quality later than the user's batch
  /// at the same settings would, so it is not taken (accepted is false).
  bool slower = false;
  /// Tried because the accepted batch below it measured more efficiency than predicted.
  bool searched_up = false;
  double phi_after = 0;   ///< the φ credited when choosing the next branch
};

struct GoodputChoice {
  bool usable = false;  ///< φ was resolved and B0 measured: the choice below stands
  std::string why;      ///< one line with the numbers, whichever way it went
  NoiseScaleEstimate noise;
  std::string noise_kind;  ///< "raw" | "AdamW-preconditioned"
  /// φ resolved: its value (the guard's run checks the prediction and corrects it); else the
  /// interval's lower end. Never more than a guard run measured.
  double phi_used = 0;
  int64_t b0 = 0;
  int64_t chosen = 0;      ///< B0 when no batch pays
  double predicted_speedup = 1;
  double gain = 1;           ///< r at the chosen batch
  double lr_multiplier = 1;  ///< r for SGD (AdaScale), √r for AdamW (AdaptDL's AdamScale)
  std::string rule;          ///< which of the two
  std::vector<GoodputPoint> curve;  ///< the batches ≥ B0 that were measured
  std::vector<GoodputBranch> branches;  ///< what the quality guard trained, in order

  /// Back to the user's batch: no batch change, no predicted gain (the curve and the branches
  /// stay on record).
  void keep_user_batch() {
    chosen = b0;
    predicted_speedup = gain = lr_multiplier = 1;
  }
};

/// The most batches the quality guard trains along the goodput curve before it falls back.
inline constexpr int kGoodputMaxBranches = 3;

/// A larger batch must be predicted at least this much faster to the target (AdaptDL's 5%).
inline constexpr double kGoodputMinGain = 0.05;
/// The most the guard credits φ up to from one accepted run that learned more than predicted:
/// this many times the φ it used (or the probe's upper end, if more).
inline constexpr double kGoodputMaxCredit = 4.0;

/// Picks among `curve` (measured samples/s by batch; only batches ≥ b0 are candidates, as in
/// AdaptDL) the batch with the highest predicted goodput at φ = noise.phi when resolved, else
/// noise.low (also when the
/// interval has no upper end. Not usable with fewer than kNoiseMinSteps measured steps, without
/// a lower bound, or when b0 has no measurement; the why then says which. `credit`: a ceiling on
/// the φ credited (what a guard run measured), below the interval's lower end.
GoodputChoice choose_by_goodput(const std::vector<std::pair<int64_t, double>>& curve, int64_t b0,
                                const NoiseScaleEstimate& noise, const std::string& noise_kind,
                                OptimizerKind optimizer, double min_gain = kGoodputMinGain,
                                double credit = std::numeric_limits<double>::infinity());

/// The guard's next step after rejecting batch `below`: the choice again among the measured
/// batches smaller than it, crediting at most `phi`.
GoodputChoice choose_below(const GoodputChoice& g, int64_t below, double phi,
                           OptimizerKind optimizer);

/// The guard's step after accepting batch `above` whose run measured more efficiency than
/// predicted: the choice among the measured batches larger than it at φ = `phi`, taken only
/// when predicted more than `min_gain` faster than `above` (else `chosen` is b0).
GoodputChoice choose_above(const GoodputChoice& g, int64_t above, double phi,
                           OptimizerKind optimizer, double min_gain = kGoodputMinGain);

/// The gain a batch above an accepted one must be predicted to have for the guard to train it
/// (search up): none, only faster. Unlike a choice made on prediction alone, that batch is
/// trained and measured before it is taken, so trying it costs a guard run, never quality.
inline constexpr double kGoodputSearchUpGain = 0.0;

/// A guard run's statistical efficiency against the reference's, from their training-loss
/// curves (loss per step). A run's loss at k steps is the mean of its last max(1, k/5) losses
/// (the guard's final-loss definition); the efficiency is the samples the reference needed to
/// reach the candidate's final loss over the candidate's samples or, when the candidate went
/// below every loss the reference reached, the reference's samples over those the candidate
/// needed to reach the reference's final loss (the mean over the reference's seeds).
struct MeasuredEfficiency {
  double efficiency = std::numeric_limits<double>::quiet_NaN();  ///< NaN: no curves
  bool crossed_late = false;  ///< measured the second way, at the reference's final loss
  bool diverged = false;  ///< non-finite, or not below the reference's loss after its first 5%
};
MeasuredEfficiency measure_efficiency(const std::vector<std::vector<double>>& reference_losses,
                                      int64_t b0, const std::vector<double>& losses,
                                      int64_t batch);

/// The φ at which E(b) = (φ + b0)/(φ + b) equals `efficiency`: 0 at or below b0/b, +inf at or
/// above 1.
double phi_from_efficiency(double efficiency, double b0, double b);


}  // namespace saturate
