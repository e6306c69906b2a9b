// SPDX-License-Identifier: Apache-2.0
#pragma once
// The staged tuner: check → baseline → precision → memory format → batch size (+ effective-batch
// policy) → memory savers → input pipeline → threads → eval batch → quality guard → confirm →
// plan. Every decision comes from measured trials through a TrialRunner, so the same code tunes a
// real model and a SimulatedDevice. The stages are a table in src/tune/tuner.cpp, one file each
// under src/tune/stages/.
//
//   TuneOptions o;  o.precisions = {Precision::kBf16};
//   Plan plan = tune(runner, base, o, [](const PlanStage& s) { print(s); });

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "saturate/tune/batch_search.h"
#include "saturate/tune/effective_batch.h"
#include "saturate/tune/plan.h"
#include "saturate/tune/trial.h"

namespace saturate {

struct TuneOptions {
  BatchSearchOptions search;
  std::vector<Precision> precisions;  ///< to try besides the base's, in order; the device's set
  /// Layouts to try besides the base's (channels-last for image inputs); empty skips the stage.
  std::vector<MemoryFormat> memory_formats;
  std::vector<int> threads;           ///< intra-op thread counts to try; empty skips the stage
  int max_workers = 0;                ///< input-pipeline workers to climb to; 0 skips the stage
  int max_prefetch = 16;              ///< deepest prefetch queue (batches) the input stage tries
  double data_wait_target = 0.02;     ///< the input stage stops once data wait is below this share
  int64_t measure_steps = 6;          ///< steps per stage measurement, the first untimed
  /// A measurement whose timed steps took less than this is taken again, long enough
  /// (trial.h's kMinTimedSeconds; 0: never).
  double min_timed_s = kMinTimedSeconds;
  double min_gain = 0.03;             ///< a change must be this much faster, and beyond noise
  EffectiveBatch effective_batch = EffectiveBatch::kAuto;
  int64_t quality_samples = 0;        ///< samples per quality run; 0 skips the guard
  double quality_tolerance = 0.01;    ///< largest accepted drop in validation accuracy (absolute)
  double loss_tolerance = 0.10;       ///< largest accepted rise in final training loss (relative)
  /// The whole tune's wall-time budget (0: none). Optional stages start only before
  /// `search_share` of it is spent; the quality guard sizes its runs to what is left.
  double budget_s = 0;
  double search_share = 0.5;
  /// The guard needs this many optimizer steps of each run to mean anything; when the budget
  /// cannot pay for that, it is not run and only changes that leave the optimisation as the
  /// user had it (accumulation, workers, threads, recomputation) are kept.
  int64_t min_quality_steps = 8;
  /// Validation samples each guard run evaluates (sizes the runs to the budget).
  int64_t eval_samples = 0;
  /// When twice the baseline's seed-to-seed noise exceeds this many quality tolerances, the
  /// guard's runs are too short to judge: status "inconclusive", math-preserving fall-back.
  double max_tolerance_factor = 5.0;
  /// Goodput (tune/goodput.h): under --effective-batch auto, the batch stage first trains this
  /// many steps of 4 × the user's batch in micro-batches to measure the gradient noise scale,
  /// then picks the batch by predicted time to target rather than samples/s (0: samples/s alone).
  int64_t noise_probe_steps = 100;
  int max_recompute_segments = 4;    ///< memory-saver stage tries 2..this segments; < 2 skips it
  /// The evaluation-batch stage: false keeps the base's eval batch (given by the user) after
  /// checking that it fits. Candidates double from the training micro-batch up to the
  /// validation split; each is measured on `eval_batches` timed batches.
  bool tune_eval_batch = true;
  /// false: no eval-batch stage at all (an --exec program evaluates by itself).
  bool eval_batch_stage = true;
  int64_t eval_batches = 2;
  double eval_tolerance = 0.03;  ///< the largest batch within this share of the fastest wins
  /// The model can be split over processes (pipeline stages or tensor parallel), which the
  /// caller's ranks stage measures: when one sample does not fit one process, tune() then
  /// returns the user's configuration with `one_process_does_not_fit` set instead of failing.
  bool model_splits = false;
  /// Set (by Ctrl-C) to stop at the next trial boundary; tune() then returns the plan so far
  /// with `interrupted` set.
  const std::atomic<bool>* stop = nullptr;
  /// Seconds since the tune began, for its budget decisions (empty: this process's steady
  /// clock). Data-parallel ranks share rank 0's, so every rank decides alike.
  std::function<double()> elapsed_s;
};

/// Runs the stages on `base` (the user's configuration) and returns the plan; `on_stage` (may be
/// empty) hears each stage as it ends. Model, data and device names in the plan are left for
/// the caller. Every configuration the plan returns peaked under the memory limit less the
/// reserve when measured. Throws saturate::Error when nothing fits (not even one sample).
Plan tune(TrialRunner& runner, const RunConfig& base, const TuneOptions& options,
          const std::function<void(const PlanStage&)>& on_stage = {});

/// The stages tune() walks, in order (src/tune/stages/, one file each).
std::vector<std::string> tune_stage_names();

}  // namespace saturate
