// SPDX-License-Identifier: Apache-2.0
#pragma once
// The effective batch (samples per optimizer step) and the learning rate that goes with it: the
// one place that decides how a batch-size change treats the user's optimisation, used by the
// tuner's batch stage and by `train --config` when it replays a plan on another batch or world.
//
//   BatchChoice c = choose_effective_batch(current, base, /*found=*/512, /*largest_safe=*/512,
//                                          EffectiveBatch::kAuto);
//   // c.outcome == kLrRescaled, c.config.train.lr rescaled, c.why says by which rule
//
//   BatchReplay r = replay_plan_batch(plan.config, plan.effective_batch, {world, ...});

#include <cstdint>
#include <string>
#include <vector>

#include "saturate/tune/goodput.h"
#include "saturate/tune/trial.h"

namespace saturate {

/// The tuner's policy: how a batch-size change treats the user's effective batch.
enum class EffectiveBatch {
  kAuto,     ///< keep it through accumulation when the batch shrinks; rescale the LR when it grows
  kKeep,     ///< never change it: a larger batch is not taken, a smaller one accumulates
  kRescale,  ///< take the measured best batch and rescale the LR (linear SGD, √ AdamW)
  /// Take the measured best batch and leave the LR alone: for a program that owns its LR
  /// (--exec), where saturate cannot rescale it. The quality guard judges the change.
  kGrow,
};
EffectiveBatch parse_effective_batch(const std::string& text);  ///< auto|keep|rescale|grow
std::string to_string(EffectiveBatch e);

/// What a plan did to the user's effective batch ("policy" in plan JSON).
enum class EffectiveBatchOutcome {
  kUnchanged,   ///< "unchanged": the user's batch, in one step
  kKept,        ///< "kept": the user's batch, split into micro-batches that fit
  kLrRescaled,  ///< "lr_rescaled": another batch, with the learning rate rescaled
  kBatchChanged,  ///< "batch_changed": another batch, the learning rate left as it was (--exec)
};
std::string to_string(EffectiveBatchOutcome e);
/// Throws saturate::Error for a name that is not one of the three.
EffectiveBatchOutcome parse_effective_batch_outcome(const std::string& text);
const std::vector<std::string>& effective_batch_outcome_names();

/// The learning rate for a batch changed from `from` to `to` samples per step: linear for SGD,
/// square root for AdamW.
double rescaled_lr(double lr, OptimizerKind optimizer, int64_t from, int64_t to);
/// "linear rule for SGD" | "square-root rule for AdamW".
std::string lr_rule_name(OptimizerKind optimizer);

/// Micro-batches of at most `micro` samples that make `batch` (at least 1).
int64_t micro_batches_for(int64_t batch, int64_t micro);

struct BatchChoice {
  RunConfig config;
  EffectiveBatchOutcome outcome = EffectiveBatchOutcome::kUnchanged;
  std::string why;
};

/// Applies the batch the search found (`found`, the largest safe `largest_safe`) to `current`
/// under `policy`; `base` is the user's configuration (its batch and learning rate). A grown
/// batch under keep, or a shrunk one under auto/keep, becomes the user's batch as micro-batches;
/// otherwise the batch changes and the LR is rescaled with the default warm-up.
BatchChoice choose_effective_batch(const RunConfig& current, const RunConfig& base, int64_t found,
                                   int64_t largest_safe, EffectiveBatch policy);

/// The batch goodput chose (tune/goodput.h): the user's batch in one step when no larger one
/// pays, else the chosen batch with the LR multiplied by the gain rule and the default warm-up.
BatchChoice goodput_batch(const RunConfig& current, const RunConfig& base,
                          const GoodputChoice& goodput);

/// The user's batch as micro-batches when the search found only smaller ones safe (the guard's
/// and the fall-back's reference): half the largest safe batch per micro-batch.
RunConfig split_to_fit(const RunConfig& base, int64_t largest_safe);

/// What `train --config` runs when it replays a plan: this run's world and the flags given on
/// the command line (a given flag always wins).
struct ReplayRequest {
  int world = 1;
  bool batch_given = false, accumulate_given = false, lr_given = false;
  int64_t batch_size = 0;  ///< per rank, when given
  int64_t accumulate = 1;  ///< when given
  double lr = 0;           ///< when given
};
struct BatchReplay {
  int64_t batch_size = 0;  ///< per rank
  int64_t accumulate = 1;
  double lr = 0;
  std::vector<std::string> info;  ///< what was changed and why, one line each
  std::vector<std::string> warn;  ///< what the user should know (the LR the rule would give)
};
/// The batch, accumulation and LR for this run: the plan's; with "kept" on another world, the
/// plan's global batch split over the ranks; a changed per-rank batch keeps the plan's
/// micro-batch; a changed global batch rescales the LR only when the plan itself rescaled it
/// (otherwise a warning gives the value the rule would).
BatchReplay replay_plan_batch(const RunConfig& plan_config, EffectiveBatchOutcome outcome,
                              const ReplayRequest& request);

}  // namespace saturate
