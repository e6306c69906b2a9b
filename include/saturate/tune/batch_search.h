// SPDX-License-Identifier: Apache-2.0
#pragma once
// Batch-size search: model peak memory as fixed + per-sample × B from two or three one-step
// probes, predict the largest batch under the memory limit minus a reserve, verify it with real
// steps (bisecting only where the model was wrong), then measure the throughput curve below it
// and pick the fastest batch, or the smallest within a tolerance of the fastest.
//
//   BatchSearchResult r = search_batch_size(runner, base, BatchSearchOptions{});
//   base.train.batch_size = r.chosen;

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "saturate/tune/trial.h"

namespace saturate {

enum class Prefer { kFaster, kSmaller };
Prefer parse_prefer(const std::string& text);  ///< "faster" | "smaller"; else saturate::Error
std::string to_string(Prefer p);

struct BatchSearchOptions {
  double reserve = 0.10;     ///< share of the memory limit kept free for fragmentation and eval
  Prefer prefer = Prefer::kFaster;
  double tolerance = 0.03;   ///< kSmaller: smallest batch within this share of the fastest
  int64_t first_probe = 8;   ///< batch of the first memory probe
  int64_t min_batch = 1;
  int64_t max_batch = 65536;  ///< cap, besides the runner's max_batch_size()
  int64_t measure_steps = 3;  ///< steps per throughput measurement, the first untimed
  /// A batch whose timed steps took less than this is measured again, long enough (0: never).
  double min_timed_s = 0;
  int64_t noise_steps = 4;    ///< steps of the top's measurement, whose scatter sets the noise
  int max_repeats = 1;        ///< runoffs of the two best when closer than their noise
  /// > 0: batches whose step would take longer than this (extrapolated from the first probe's
  /// samples/s, allowing throughput to double) are not tried: the time budget, not a constant,
  /// bounds the batch on a device with memory to spare.
  double max_step_s = 0;
  /// Called before every trial (may throw to abandon the search, e.g. on Ctrl-C).
  std::function<void()> before_trial;
  /// True once the time for the search is spent: it then refines no further and picks from
  /// what it has measured.
  std::function<bool()> out_of_time;
};

/// One trial of a search, for plans and reports.
struct SearchTrial {
  std::string purpose;  ///< "memory probe", "verify", "throughput", "repeat"
  RunConfig config;
  TrialOutcome outcome;
};

struct CurvePoint {
  int64_t batch_size = 0;
  double samples_per_s = 0;  ///< all timed steps of all its measurements
  double noise = 0;          ///< standard error estimate, relative
  int64_t timed_steps = 0;
};

struct BatchSearchResult {
  int64_t chosen = 0;          ///< the batch size picked
  double samples_per_s = 0;    ///< measured at `chosen`
  int64_t chosen_peak_memory_bytes = 0;
  int64_t largest_safe = 0;    ///< largest batch verified under limit × (1 − reserve)
  int64_t predicted = 0;       ///< the memory model's first prediction of it
  double fixed_bytes = 0, bytes_per_sample = 0;  ///< the memory model's last fit
  std::vector<CurvePoint> curve;  ///< measured throughput, by batch size
  std::vector<SearchTrial> trials;
  int64_t steps = 0;  ///< training steps run, OOM steps included
  int64_t ooms = 0;
  std::string why;    ///< one line: why this batch
};

/// Searches the batch size of `base` (accumulation set to 1; the other settings kept). Throws
/// saturate::Error when not even one sample fits under the limit minus the reserve.
BatchSearchResult search_batch_size(TrialRunner& runner, const RunConfig& base,
                                    const BatchSearchOptions& options = {});

}  // namespace saturate
