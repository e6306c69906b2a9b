// SPDX-License-Identifier: Apache-2.0
#pragma once
// The quality guard's decisions, as pure functions: how long its runs can be in the budget left,
// how wide its tolerances are given the baseline's seed-to-seed noise, and whether a candidate
// passes. The guard stage (src/tune/stages/quality_guard.cpp) runs the trainings; these decide.
//
//   GuardSizing z = size_guard(cost, options, left_s);
//   if (!z.affordable()) fall_back();
//   GuardTolerances tol = guard_tolerances(baseline, baseline_seed2, options);
//   GuardVerdict v = judge_candidate(baseline, candidate, tol, target_bytes);

#include <cstdint>
#include <string>

#include "saturate/tune/trial.h"

namespace saturate {

struct TuneOptions;

/// What the guard's runs cost: the sum over its runs (two baseline seeds and each candidate) of
/// seconds per training sample, the largest batch among them, and the slowest samples/s seen.
struct GuardCost {
  double seconds_per_sample = 0;
  int64_t largest_batch = 1;
  int runs = 2;
  double slowest_samples_per_s = 1;
  /// Seconds each run costs besides its samples (a foreign program's start-up: the runner's
  /// run_overhead_s()).
  double fixed_s_per_run = 0;
};

struct GuardSizing {
  int64_t samples = 0;  ///< training samples each run gets
  int64_t needed = 0;   ///< what a meaningful run needs: min_quality_steps of the largest batch
  bool affordable() const { return samples >= needed; }
};

/// The samples per run: at least the asked `quality_samples` and what a meaningful run needs,
/// at most what `left_s` (infinite: no budget) pays for after each run evaluates the validation
/// split (inference taken as twice a training step's samples/s) and its fixed cost, with 20% of
/// the time kept back and 15% for building and starting each run.
GuardSizing size_guard(const GuardCost& cost, const TuneOptions& options, double left_s);

struct GuardTolerances {
  double metric_noise = 0;  ///< |metric(seed) − metric(seed+1)|
  double loss_noise = 0;    ///< the same for the final loss, relative
  double metric = 0;        ///< the largest accepted drop of the validation metric (absolute)
  double loss = 0;          ///< the largest accepted rise of the final loss (relative)
  bool conclusive = true;   ///< false: the noise exceeds max_tolerance_factor tolerances
};

/// Tolerances no tighter than twice the metric's own scatter between two seeds of the baseline
/// (a tighter one would reject by chance); runs so noisy that this exceeds the options'
/// max_tolerance_factor × quality_tolerance cannot judge a change at all.
GuardTolerances guard_tolerances(const QualityRun& baseline, const QualityRun& baseline_seed2,
                                 const TuneOptions& options);

struct GuardVerdict {
  bool fits = false;       ///< ran under the memory target
  bool metric_ok = false;  ///< validation metric within the tolerance (finite)
  bool loss_ok = false;    ///< final loss within the tolerance (finite)
  bool accepted() const { return fits && metric_ok && loss_ok; }
  /// "accuracy drop above the tolerance, loss rise above the tolerance" (empty when accepted).
  std::string reasons() const;
};

/// Judges one candidate's run against the baseline's: it must fit under `target_bytes` (0 peak:
/// unknown, taken as fitting), have finite numbers, a metric no more than `tol.metric` lower and a
/// final loss no more than `tol.loss` higher (relative, with an absolute floor of 0.01, since
/// near-zero losses differ by large ratios of nothing).
GuardVerdict judge_candidate(const QualityRun& baseline, const QualityRun& candidate,
                             const GuardTolerances& tol, int64_t target_bytes);

}  // namespace saturate
