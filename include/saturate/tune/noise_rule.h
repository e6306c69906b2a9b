// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tuner's one rule for "faster": a measured gain counts only when it is large enough to
// matter and beyond what the measurements' own noise could produce.
//
//   if (beats(tuned_sps, tuned_noise, base_sps, base_noise, /*min_gain=*/0.03)) take(tuned);
//   if (clearly_slower(sps_at_64, best_sps, noise)) stop_walking_down();
//
// Both count a difference only beyond kNoiseSigmas relative standard errors. The batch search
// uses clearly_slower on its smoothed curve; every stage, the ranks stage included, uses beats.

namespace saturate {

/// How many combined relative standard errors a difference must exceed to count.
inline constexpr double kNoiseSigmas = 2.0;

/// True when `a_samples_per_s` beats `b_samples_per_s`: the gain a/b - 1 is at least
/// `min_gain` and more than twice the comparison's noise, the two relative standard errors
/// (`a_noise`, `b_noise`, fractions of each mean) combined. A non-positive `b` is beaten by any
/// positive `a`.
bool beats(double a_samples_per_s, double a_noise, double b_samples_per_s, double b_noise,
           double min_gain);

/// True when `slower` falls short of `faster` by more than kNoiseSigmas × `noise` (a relative
/// standard error of their difference, a fraction of `faster`).
bool clearly_slower(double slower, double faster, double noise);


}  // namespace saturate
