// SPDX-License-Identifier: Apache-2.0
#pragma once
// Plan: what `saturate tune` decided and why, written as plan.json and run by
// `saturate train --config plan.json`. Schema-versioned; reading validates every field it uses
// and names the file and field of the first problem.
//
//   Plan p = read_plan("plan.json");        // saturate::Error naming file and field
//   TrainOptions o = p.config.train;        // batch_size, precision, accumulate, lr, ...
//   write_plan(p, "plan.json");             // atomic

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "saturate/tune/effective_batch.h"
#include "saturate/tune/goodput.h"
#include "saturate/tune/trial.h"

namespace saturate {

inline constexpr int kPlanSchemaVersion = 1;

/// Throughput, memory and quality of one configuration (baseline or tuned).
struct PlanResult {
  double samples_per_s = 0;
  double spread = 0;
  int64_t peak_memory_bytes = 0;
  double validation_metric = -1;  ///< validation accuracy in [0, 1] from the guard; -1 if not run
  double final_loss = -1;         ///< mean training loss at the end of the quality run; -1 if not run
  PhaseBreakdown phases;          ///< written as "phases_ms"
};

/// One stage of the staged plan: baseline, precision, batch_size, memory_savers, threads,
/// quality_guard.
struct PlanStage {
  std::string name;
  double before_samples_per_s = 0;
  double after_samples_per_s = 0;
  bool changed = false;  ///< the stage changed the configuration
  std::string why;       ///< one sentence with numbers
};

/// One trial, as run: what was asked and what came back.
struct PlanTrial {
  std::string stage;
  std::string purpose;  ///< "memory probe", "verify", "throughput", "repeat", "measure"
  RunConfig config;
  bool fits = false;    ///< written as "outcome": "fits" | "oom"
  double samples_per_s = 0;
  double spread = 0;
  int64_t peak_memory_bytes = 0;
  int64_t steps = 0;
};

/// What the quality guard concluded ("status" in plan JSON).
enum class QualityStatus {
  kNotRun,        ///< "not_run": nothing to check, or asked off, or interrupted
  kAccepted,      ///< "accepted": a tuned candidate passed
  kRejected,      ///< "rejected": every candidate failed; the plan fell back
  kUnaffordable,  ///< "unaffordable": the budget could not pay for a meaningful run; fell back
  kInconclusive,  ///< "inconclusive": the affordable runs were noisier than the tolerance
};
std::string to_string(QualityStatus s);
const std::vector<std::string>& quality_status_names();

/// The quality guard: the baseline and the tuned configuration trained on the same samples from
/// the same seed, compared on the held-out validation metric and the final training loss,
/// against tolerances no tighter than the metric's own seed-to-seed noise.
struct QualityCheck {
  QualityStatus status = QualityStatus::kNotRun;
  std::string metric = "val_accuracy";
  double baseline = -1, tuned = -1;          ///< validation metric of each
  double baseline_loss = -1, tuned_loss = -1;  ///< mean training loss at the end
  std::vector<double> baseline_losses, tuned_losses;  ///< training loss per step of each run
  double tolerance = 0.01;  ///< the tuned metric may be at most this much lower (absolute)
  double metric_noise = -1;  ///< |metric(seed) − metric(seed+1)| of the baseline; -1: not measured
  double loss_noise = -1;    ///< the same for the final training loss, relative
  int64_t samples = 0;      ///< training samples each run saw
  int64_t val_samples = 0;  ///< size of the validation split
  double val_fraction = 0;  ///< share of the training data held out for it
  bool accepted = false;
  std::string why;
};

/// A plan for a user's own program (`tune --exec`): what `train --config` runs, and how the
/// program did with its own settings. Empty for a built-in model.
struct PlanExec {
  std::vector<std::string> command;  ///< the words after `--`, {placeholders} kept
  std::vector<std::pair<std::string, std::string>> maps;  ///< --map setting → the program's flag
  bool metrics_on_stdout = false;
  std::map<std::string, std::string> settings;  ///< the tuned settings, by the protocol's names
  std::vector<std::string> applied;  ///< the settings the program applies
  std::string reproduce;             ///< a shell line that runs the tuned program
  /// The program's first run, with only the settings given on the command line: its own
  /// defaults (as its start line reported them) and its samples/s.
  std::map<std::string, std::string> defaults;
  double defaults_samples_per_s = 0;
  int64_t runs = 0;  ///< runs of the program the tune made
  bool empty() const { return command.empty(); }
};

struct Plan {
  int schema_version = kPlanSchemaVersion;
  std::string model, data, device;
  RunConfig config;      ///< what to train with
  EffectiveBatchOutcome effective_batch = EffectiveBatchOutcome::kUnchanged;
  std::string effective_batch_why;
  int64_t memory_limit_bytes = 0;  ///< 0: the device's own
  double reserve = 0.10;
  PlanResult baseline, tuned;
  std::vector<PlanStage> stages;
  std::vector<PlanTrial> trials;
  QualityCheck quality;
  int64_t probe_steps = 0;  ///< training steps the search ran (OOM steps included)
  double tune_wall_s = 0;
  double budget_s = 0;      ///< the --budget-s it ran under (0: none)
  bool interrupted = false;  ///< stopped early (Ctrl-C): the stages so far, quality unchecked
  /// One sample did not fit one process (TuneOptions::model_splits): no stage ran past the
  /// check, and only a layout over processes can train the model. Not written to the file.
  bool one_process_does_not_fit = false;
  /// The recipe's input flags, so `train --config` builds the pipeline the trials measured.
  int64_t crop = 0, pad = 0;
  bool flip = false;
  int64_t seq_len = 0;  ///< text data: tokens per window (0: images, or the default)
  std::string cache;  ///< a size such as "1GiB"; empty: none
  /// "flush" (denormals to zero, FTZ/DAZ) | "keep": the CPU float mode the trials ran under.
  std::string denormals = "flush";
  /// What the eval-batch stage measured at config.eval_batch_size (0: not measured).
  double eval_samples_per_s = 0;
  int64_t eval_peak_memory_bytes = 0;
  PlanExec exec;  ///< set for a user's own program (tune --exec)
  /// The batch stage's goodput choice: the noise scale it measured, the batch it predicts fastest
  /// to a target and by how much, the LR rule (noise.steps == 0: not measured).
  GoodputChoice goodput;
};

nlohmann::json to_json(const Plan& plan);
/// Validates; errors name `source` (a file path) and the field, e.g.
/// "plan.json: config.batch_size must be a positive integer".
Plan plan_from_json(const nlohmann::json& j, const std::string& source);
/// Atomic write; saturate::Error naming the path when it cannot be written.
void write_plan(const Plan& plan, const std::string& path);
/// saturate::Error naming the path for a missing file, bad JSON or a bad field.
Plan read_plan(const std::string& path);

}  // namespace saturate
