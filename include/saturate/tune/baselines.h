// SPDX-License-Identifier: Apache-2.0
#pragma once
// Baseline batch-size strategies, run through the same TrialRunner as saturate's own search so a
// benchmark can compare them trial for trial: Lightning's BatchSizeFinder ("power" and
// "binsearch", with Lightning's defaults) and Accelerate's find_executable_batch_size (start at
// 128, ×0.9 after each out-of-memory). Each trial is `steps_per_trial` steps, none untimed.
//
//   BaselineResult r = lightning_binsearch(runner, base);
//   compare(r.chosen, r.steps, r.ooms);

#include <cstdint>
#include <string>
#include <vector>

#include "saturate/tune/batch_search.h"
#include "saturate/tune/trial.h"

namespace saturate {

struct BaselineResult {
  std::string strategy;  ///< "lightning-power", "lightning-binsearch" or "accelerate-shrink"
  /// The batch size the strategy returns; 0 when it found none. As with the originals it need
  /// not have been tried (Lightning's max_val stop, binsearch's assumed 1 and its margin).
  int64_t chosen = 0;
  std::vector<SearchTrial> trials;  ///< in order; purpose names the step that chose the size
  int64_t steps = 0;  ///< training steps run, as the runner reported them (OOM steps included)
  int64_t ooms = 0;   ///< trials that ran out of memory
};

/// Lightning BatchSizeFinder arguments, with its defaults (v2.6).
struct LightningOptions {
  int64_t init_val = 2;         ///< first batch size tried
  int64_t steps_per_trial = 3;  ///< training steps per trial (Lightning adds up to 3 val batches)
  /// power: trials in all; binsearch: successful trials (as Lightning counts them)
  int max_trials = 25;
  double margin = 0.05;    ///< binsearch only: the result is max(1, int(found × (1 − margin)))
  int64_t max_val = 8192;  ///< a candidate reaching it stops the search and is returned untried
};

/// Doubles from init_val while trials fit; on the first out-of-memory after a success returns
/// the last size that fit (Lightning: half the failing size, the same below the caps). Before
/// any success it keeps halving; 0 when even batch 1 runs out of memory. Candidates are capped
/// at max_val and the runner's max_batch_size(). Throws saturate::Error for invalid options.
BaselineResult lightning_power(TrialRunner& runner, const RunConfig& base,
                               const LightningOptions& options = {});

/// Doubles from init_val until an out-of-memory, then bisects between the last size that fit
/// (1 when none did: Lightning assumes it) and the first that did not; returns
/// max(1, int(found × (1 − margin))), so never 0. Throws saturate::Error for invalid options.
BaselineResult lightning_binsearch(TrialRunner& runner, const RunConfig& base,
                                   const LightningOptions& options = {});

/// Accelerate find_executable_batch_size arguments, with its defaults (v1.9).
struct AccelerateOptions {
  int64_t starting_batch_size = 128;
  int64_t steps_per_trial = 3;  ///< stands in for the whole training function Accelerate reruns
};

/// Tries starting_batch_size (capped at the runner's max_batch_size()), then int(b × 0.9) after
/// each out-of-memory, and returns the first size that fits, or 0 when the size reaches 0
/// (where Accelerate raises). Never tries a larger size than the start, however much fits.
BaselineResult accelerate_shrink(TrialRunner& runner, const RunConfig& base,
                                 const AccelerateOptions& options = {});

}  // namespace saturate
